"""Timers, launch and FLOP counters, fresh inputs and tolerances."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from fusionlab.measure.timing import (
    CPU_TIMING_THREADS,
    Timing,
    assert_outputs_close,
    count_flops,
    count_launches,
    fixed_threads,
    fresh_inputs,
    median_wall_ms,
    node_flops,
    time_cpu,
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


@pytest.fixture
def two_threads() -> Iterator[None]:
    """The process as a notebook kernel starts on a 2-core machine: torch's default of one thread per core."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_fixed_threads_sets_the_count_and_restores_it(two_threads: None) -> None:
    with fixed_threads(1) as used:
        assert used == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError, match="inside"), fixed_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2  # restored on an error too
    for wrong in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match=f"threads must be a whole number of at least 1, got {wrong!r}"):
            with fixed_threads(wrong):  # type: ignore[arg-type]
                pass


def test_cpu_timing_runs_every_call_at_the_fixed_thread_count_in_rounds(two_threads: None) -> None:
    seen: list[int] = []
    x = torch.randn(64, 64)

    def run() -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return x @ x

    timing = time_cpu(run, rounds=4, repeat=3, warmup=1)
    assert CPU_TIMING_THREADS == 1 and timing.threads == 1 and set(seen) == {1}
    assert len(timing.round_ms) == 4 and len(seen) >= 4 * 3 + 1
    assert timing.low_ms <= timing.median_ms <= timing.high_ms and timing.low_ms > 0
    assert torch.get_num_threads() == 2
    assert time_cpu(run, rounds=1, repeat=1, threads=2).threads == 2
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        time_cpu(run, rounds=0)


def test_a_timing_carries_its_spread_and_says_when_it_is_noisy() -> None:
    steady = Timing.of([0.21, 0.20, 0.25], threads=1)
    assert (steady.median_ms, steady.low_ms, steady.high_ms) == (0.21, 0.20, 0.25)
    assert steady.spread == pytest.approx(1.25) and not steady.noisy
    assert repr(steady) == "Timing(0.21 ms (0.2-0.25 ms over 3 rounds, 1 thread))"
    busy = Timing.of([0.07, 24.0, 0.08], threads=2)  # the teacher's two figures, a minute apart
    assert busy.noisy and busy.median_ms == 0.08
    assert busy.as_text().endswith("2 threads); noisy: rounds differ 343x")
    with pytest.raises(ValueError, match="at least one round"):
        Timing.of([])


def test_warm_up_runs_until_its_time_has_passed() -> None:
    calls: list[float] = []
    median_wall_ms(lambda: calls.append(time.perf_counter()), repeat=1, warmup=1, warmup_s=0.005)
    # the timed run starts once the untimed ones have taken 5 ms (or there were 100 of them)
    assert calls[-1] - calls[0] >= 0.004 or len(calls) == 101
