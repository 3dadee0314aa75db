"""Online softmax (codegen/online_softmax.py): a looped row's maximum and sum of exponentials in one pass, checked
against eager on rows longer than the persistent limit, with -inf, NaN, +inf and fully masked rows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fusionlab as fl
from fusionlab.codegen.plan import PERSISTENT_LIMIT

ROW = PERSISTENT_LIMIT + 1000  # looped, and the last block of a row is partial


def _logsumexp(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x, dim=-1)


def _masked_softmax(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x + mask, dim=-1)


# Masked lanes and rows of -inf must not compute -inf - -inf (the interpreter's numpy warns, and a notebook shows it).
no_warnings = pytest.mark.filterwarnings("error::RuntimeWarning")


@no_warnings
@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: torch.log_softmax(x, -1)],
                         ids=["softmax", "log_softmax"])
def test_long_rows_take_one_pass_for_max_and_sum(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    x = torch.randn(3, ROW) * 4
    ex = fl.explore(fn, x)
    (kernel,) = [k for k in ex.generated.kernels if k.kind == "reduction"]
    assert "online softmax" in kernel.source
    assert kernel.source.count("for roffset in") == 2  # the maximum and the sum, then the output pass
    report = ex.verify()
    assert report.ok, report


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # +inf - +inf, as eager computes
def test_special_values_match_eager() -> None:
    # Row 0: -inf entries (masked keys) and a large spread; row 1: a NaN; row 2: all -inf; row 3: +inf.
    x = torch.randn(4, ROW) * 30
    x[0, ::3] = float("-inf")
    x[1, ROW // 2] = float("nan")
    x[2] = float("-inf")
    x[3, 7] = float("inf")
    for fn in (lambda t: torch.softmax(t, -1), lambda t: torch.log_softmax(t, -1)):
        fused = fl.explore(fn, x)(x)
        torch.testing.assert_close(fused, fn(x), equal_nan=True, rtol=1e-5, atol=1e-6)


@no_warnings
def test_masked_softmax_and_bfloat16() -> None:
    x = torch.randn(2, ROW)
    mask = torch.zeros(2, ROW)
    mask[1, ROW // 3:] = torch.finfo(torch.float32).min
    assert fl.explore(_masked_softmax, x, mask).verify().ok
    half = torch.randn(2, ROW, dtype=torch.bfloat16)
    report = fl.explore(lambda t: torch.log_softmax(t, -1), half).verify()
    assert report.ok, report


def _shifted(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.exp(x - y.amax(-1, keepdim=True)).sum(-1)


@no_warnings
@pytest.mark.parametrize("fn", [_shifted, _logsumexp], ids=["max_of_another_row", "logsumexp"])
def test_a_sum_shifted_by_something_else_keeps_its_own_loop(fn: Callable[..., torch.Tensor]) -> None:
    # exp(x - amax(y)) for another y, or logsumexp's exp(x - where(isinf(m), 0, m)), is not the pattern: two loops,
    # still equal to eager.
    inputs = (torch.randn(2, ROW), torch.randn(2, ROW))[: 2 if fn is _shifted else 1]
    ex = fl.explore(fn, *inputs)
    assert all("online softmax" not in k.source for k in ex.generated.kernels)
    assert ex.verify().ok
