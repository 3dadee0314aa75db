"""Measuring tools for `fusionlab.measure.bench`: timers, launch counters, FLOP counts, fresh inputs, tolerances.

On CUDA, times are CUDA-event medians (`triton.testing.do_bench`) and launches come from the profiler.
On a CPU, times are wall-clock medians taken at a fixed thread count (`CPU_TIMING_THREADS`, set for the
measurement and restored after), over several rounds whose spread is kept (`Timing`); eager "launches" are the
aten operator calls that do work.

Why one thread: at the sizes a notebook uses, an op takes microseconds and a second thread saves little, but each
parallel op ends at an OpenMP barrier that waits for every thread; when another process or thread holds a core,
that wait is a scheduler time slice. On a busy 2-core machine the same 64x128 layer norm + matmul + GELU took
15.9 ms with 2 threads and 0.30 ms with 1; a teacher saw 0.07 ms and 24 ms a minute apart.

    >>> timing = time_cpu(lambda: torch.randn(256, 256).sum(), rounds=3, repeat=5)
    >>> timing.threads, len(timing.round_ms), timing.low_ms <= timing.median_ms <= timing.high_ms
    (1, 3, True)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from fusionlab.compare import TOLERANCES

__all__ = [
    "CPU_TIMING_THREADS",
    "NOISY_SPREAD",
    "Timing",
    "assert_outputs_close",
    "check_threads",
    "count_flops",
    "count_launches",
    "cuda_kernel_ms",
    "device_of",
    "fixed_threads",
    "fresh_inputs",
    "median_cuda_ms",
    "median_wall_ms",
    "node_flops",
    "quiet_cuda_toolkit_lookup",
    "threads_text",
    "time_cpu",
    "tolerance",
]

CPU_TIMING_THREADS = 1  # the thread count every CPU timing uses unless told otherwise (see the module's docstring)
NOISY_SPREAD = 2.0  # a timing whose slowest round took over this many times its fastest is flagged as noisy


@functools.cache
def quiet_cuda_toolkit_lookup() -> None:
    """Let a CUDA build of torch on a machine with no GPU look for the CUDA toolkit once, quietly.

    Inductor's C++ backend (the benchmark's Inductor column on a CPU) imports `torch.utils.cpp_extension`,
    whose import asks CUDA whether it is there and logs "No CUDA runtime is found, using CUDA_HOME=..." in red
    under the cell when a toolkit folder exists. We cause that import, so we make it first, with the note and
    CUDA's own "no driver" warning held back. A CPU build of torch (no CUDA) has nothing to look up.
    """
    if torch.version.cuda is None or "torch.utils.cpp_extension" in sys.modules:
        return
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module("torch.utils.cpp_extension")  # its import is the lookup
    finally:
        logger.setLevel(level)


def device_of(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> torch.device:
    """Where a call runs: the device of the first input tensor, else of the module's first parameter, else CPU."""
    for value in pytree.tree_leaves(list(inputs)):
        if isinstance(value, torch.Tensor):
            return value.device
    if isinstance(fn, torch.nn.Module):
        for parameter in fn.parameters():
            return parameter.device
    return torch.device("cpu")


def idle_host_ms(run: Callable[[], Any], *, calls: int = 15) -> float:
    """Median milliseconds until one call of `run` returns, started on an idle GPU (synchronised before, not
    inside): the host's own time to issue the work (CUDA only)."""
    seconds = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(seconds) * 1e3


def median_wall_ms(run: Callable[[], Any], *, repeat: int = 20, warmup: int = 3, warmup_s: float = 0.0) -> float:
    """Median wall-clock milliseconds of `run()` over `repeat` runs, after `warmup` untimed ones (and more, up to
    100, until `warmup_s` seconds have passed: a sub-millisecond call needs more than three to settle)."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    start, runs = time.perf_counter(), 0
    while runs < warmup or (runs < 100 and time.perf_counter() - start < warmup_s):
        run()
        runs += 1
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1e3


def check_threads(threads: Any) -> int:
    """`threads` if it is a thread count (a whole number, at least 1); else a ValueError saying what to pass."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a whole number of at least 1, got {threads!r}: pass threads=1 to time "
                         "on one core (the default), or the number of cores this process may use")
    return threads


@contextlib.contextmanager
def fixed_threads(threads: int) -> Iterator[int]:
    """Run the block with torch's intra-op thread count set to `threads`; the previous count is restored after.

    Inductor's C++ kernels take the thread count in force when they are compiled: compile them inside the block too.
    """
    check_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Timing:
    """One program's time over several rounds: the median of the rounds' medians, and the rounds themselves.

    `threads` is the CPU thread count it ran with (None on CUDA); `clock` says what measured it.
    Example: `Timing.of([0.21, 0.20, 0.25], threads=1)` -> `Timing(0.21 ms (0.2-0.25 ms over 3 rounds, 1 thread))`.
    """

    median_ms: float
    round_ms: tuple[float, ...]
    threads: int | None = None
    clock: str = "wall clock"

    @classmethod
    def of(cls, round_ms: Sequence[float], threads: int | None = None, clock: str = "wall clock") -> Timing:
        if not round_ms:
            raise ValueError("a Timing needs at least one round's time: got none")
        return cls(statistics.median(round_ms), tuple(float(value) for value in round_ms), threads, clock)

    @property
    def low_ms(self) -> float:
        return min(self.round_ms)

    @property
    def high_ms(self) -> float:
        return max(self.round_ms)

    @property
    def spread(self) -> float:
        """The slowest round over the fastest (1.0: all rounds alike)."""
        return self.high_ms / self.low_ms if self.low_ms > 0 else float("inf")

    @property
    def noisy(self) -> bool:
        """True when the rounds differ by more than `NOISY_SPREAD` times: the machine was busy, run again."""
        return self.spread > NOISY_SPREAD

    def as_text(self) -> str:
        where = f", {threads_text(self.threads)}" if self.threads else ""
        text = f"{self.median_ms:.4g} ms ({self.low_ms:.4g}-{self.high_ms:.4g} ms over {len(self.round_ms)} rounds" \
               f"{where})"
        return text + (f"; noisy: rounds differ {self.spread:.3g}x" if self.noisy else "")

    def __repr__(self) -> str:
        return f"Timing({self.as_text()})"


def threads_text(threads: int | None) -> str:
    """'1 thread', '4 threads'; '' when unknown (CUDA)."""
    if not threads:
        return ""
    return f"{threads} thread" + ("" if threads == 1 else "s")


def time_cpu(run: Callable[[], Any], *, rounds: int = 5, repeat: int = 20, warmup: int = 3,
             threads: int = CPU_TIMING_THREADS) -> Timing:
    """Wall-clock `Timing` of `run()` at `threads` threads: `rounds` rounds, each the median of `repeat` runs."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    with fixed_threads(threads) as used:
        round_ms = [median_wall_ms(run, repeat=repeat, warmup=warmup if turn == 0 else 1, warmup_s=0.02 if turn == 0
                                   else 0.0) for turn in range(rounds)]
    return Timing.of(round_ms, threads=used)


def median_cuda_ms(run: Callable[[], Any]) -> float:
    """Median milliseconds of `run()` on the GPU, by CUDA events (L2 flushed between runs)."""
    from triton.testing import do_bench

    return float(do_bench(run, return_mode="median"))


def is_device_kernel(event: Any) -> bool:
    """Whether a profiler event is a kernel the GPU ran: not a copy or a memset, and not a user annotation's span
    on the GPU timeline (Kineto gives every `record_function` range, Inductor's and our module ranges among them,
    a CUDA-typed twin spanning the kernels launched inside it; summing those counts the kernels twice or more)."""
    from torch.autograd import DeviceType

    if event.device_type != DeviceType.CUDA or event.name.startswith(("Memcpy", "Memset")):
        return False
    if getattr(event, "is_user_annotation", False):
        return False
    return "annotation" not in str(getattr(event, "activity_type", "") or "")


def cuda_kernel_ms(run: Callable[[], Any], *, iterations: int = 10) -> tuple[dict[str, float], int]:
    """Per-kernel GPU milliseconds for one call of `run` (mean over `iterations`), and launches per call."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            for _ in range(iterations):
                run()
            torch.cuda.synchronize()
    totals: dict[str, float] = {}
    launches = 0
    for event in profiler.events():
        if not is_device_kernel(event):
            continue
        launches += 1
        totals[event.name] = totals.get(event.name, 0.0) + event.time_range.elapsed_us() / 1e3
    per_call = {name: total / iterations for name, total in totals.items()}
    return per_call, round(launches / iterations)


# Calls that launch nothing: views whose schema does not say so, and allocations.
_NO_WORK = frozenset({"_unsafe_view", "alias", "detach", "lift_fresh", "empty", "empty_like", "empty_strided"})


class _OperatorCounter(TorchDispatchMode):
    """Counts the aten calls that do work (views, allocations and other metadata-only calls excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(getattr(func, "_overloadpacket", func)).split(".")[-1]
        if not getattr(func, "is_view", False) and name not in _NO_WORK:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def count_launches(run: Callable[[], Any], device: torch.device) -> int:
    """Kernel launches per call: profiled on CUDA; aten calls that do work elsewhere."""
    if device.type == "cuda":
        return cuda_kernel_ms(run, iterations=3)[1]
    quiet_cuda_toolkit_lookup()  # before the benchmark's Inductor compiles for the CPU
    counter = _OperatorCounter()
    with counter:
        run()
    return counter.calls


def count_flops(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> int:
    """FLOPs of one eager call, as FlopCounterMode counts them (matmuls, convolutions, attention)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn(*inputs)
    return int(counter.get_total_flops())


def node_flops(graph_module: torch.fx.GraphModule) -> dict[str, int]:
    """FLOPs of each node of an aten graph with shapes in `meta["val"]` (matmul-like nodes only)."""
    flops: dict[str, int] = {}
    for node in graph_module.graph.nodes:
        packet = getattr(node.target, "_overloadpacket", None)
        if node.op != "call_function" or packet not in flop_registry:
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
        try:
            flops[node.name] = int(flop_registry[packet](*args, out_val=node.meta.get("val"), **kwargs))
        except (TypeError, AttributeError, ValueError, RuntimeError):
            continue  # a node without shapes in its meta: leave it uncounted
    return flops


def fresh_inputs(inputs: tuple[Any, ...], seed: int = 1) -> tuple[Any, ...]:
    """New random values shaped like `inputs`: floats from N(0, 1) (non-zero), other tensors copied."""
    generator_by_device: dict[torch.device, torch.Generator] = {}

    def fresh(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if not value.is_floating_point():
            return value.clone()
        if value.device not in generator_by_device:
            generator_by_device[value.device] = torch.Generator(device=value.device).manual_seed(seed)
        sample = torch.randn(
            value.shape, generator=generator_by_device[value.device], device=value.device, dtype=torch.float32
        )
        return sample.to(value.dtype).requires_grad_(value.requires_grad)

    return tuple(pytree.tree_map(fresh, list(inputs)))


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing fused results with eager in `dtype`: the table in `fusionlab.compare`."""
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    return rtol, atol


def assert_outputs_close(actual: Any, expected: Any, what: str) -> None:
    """Raise AssertionError naming `what` unless every output matches eager within its dtype's tolerance."""
    actual_leaves = [leaf for leaf in pytree.tree_leaves(actual) if isinstance(leaf, torch.Tensor)]
    expected_leaves = [leaf for leaf in pytree.tree_leaves(expected) if isinstance(leaf, torch.Tensor)]
    if len(actual_leaves) != len(expected_leaves):
        raise AssertionError(
            f"{what} returned {len(actual_leaves)} tensors, eager {len(expected_leaves)}: they must match"
        )
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        rtol, atol = tolerance(want.dtype)
        try:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            raise AssertionError(f"{what} output {index} differs from eager: {error}") from None
