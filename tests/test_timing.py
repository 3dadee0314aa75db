"""Timers, launch and FLOP counters, fresh inputs and tolerances."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from fusionlab.measure.timing import (
    assert_outputs_close,
    count_flops,
    count_launches,
    fresh_inputs,
    median_wall_ms,
    node_flops,
    tolerance,
)


def test_median_wall_ms() -> None:
    assert median_wall_ms(lambda: torch.randn(64, 64).sum(), repeat=3, warmup=1) > 0
    with pytest.raises(ValueError, match="at least 1"):
        median_wall_ms(lambda: None, repeat=0)


def test_cpu_launches_count_working_aten_calls_not_views() -> None:
    x, b = torch.randn(8, 16), torch.randn(16)
    assert count_launches(lambda: F.gelu(x + b), torch.device("cpu")) == 2
    assert count_launches(lambda: (x.t().reshape(-1) + 1), torch.device("cpu")) == 2  # reshape of a t copies


def test_flops_of_a_matmul() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    assert count_flops(torch.mm, (x, w)) == 2 * 8 * 16 * 32
    graph = make_fx(lambda a, b: torch.relu(a @ b))(x, w)
    assert node_flops(graph) == {"mm": 2 * 8 * 16 * 32}


def test_fresh_inputs_are_new_nonzero_and_shaped_alike() -> None:
    x, index = torch.randn(32, 8, dtype=torch.bfloat16), torch.arange(4)
    new_x, new_index, scale = fresh_inputs((x, index, 2.0))
    assert new_x.shape == x.shape and new_x.dtype == x.dtype and not torch.equal(new_x, x)
    assert (new_x != 0).all()
    assert torch.equal(new_index, index) and new_index is not index
    assert scale == 2.0


def test_tolerances_by_dtype_and_named_failures() -> None:
    assert tolerance(torch.bfloat16) > tolerance(torch.float16) > tolerance(torch.float32)
    x = torch.randn(16)
    assert_outputs_close((x + 1e-6,), (x,), "mine")
    with pytest.raises(AssertionError, match="mine output 1 differs"):
        assert_outputs_close((x, x + 1), (x, x), "mine")
    with pytest.raises(AssertionError, match="returned 1 tensors, eager 2"):
        assert_outputs_close((x,), (x, x), "mine")
