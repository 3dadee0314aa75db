"""Benchmark one exploration: eager vs fusionlab vs Inductor, per program and per kernel.

On CUDA every variant is timed with CUDA events (after fusionlab's output is checked against eager on
fresh inputs) and per-kernel times come from the profiler. On a CPU, eager and Inductor are timed by the
wall clock, and fusionlab is *modelled* on a GPU profile from the bytes its plan moves and its launches:
Triton's interpreter is never timed. For comparison the model also gets Inductor's GPU plan (its Triton
kernels, generated on the CPU) and the unfused plan (fusionlab with policy "none": one kernel per primitive).

    >>> report = benchmark(fl.explore(fn, *inputs))      # doctest: +SKIP
    >>> report.table                                      # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from fusionlab.explore import explore
from fusionlab.inductor import InductorView, compile_inductor, inductor_view
from fusionlab.measure.devices import DeviceProfile, get_profile, measure_copy_bandwidth, model_time
from fusionlab.measure.report import BenchReport, BenchRow, recorded_results
from fusionlab.measure.timing import (
    CPU_TIMING_THREADS,
    assert_outputs_close,
    check_threads,
    count_flops,
    count_launches,
    cuda_kernel_ms,
    device_of,
    fixed_threads,
    fresh_inputs,
    median_cuda_ms,
    median_wall_ms,
    node_flops,
)
from fusionlab.measure.workloads import find, tensor_bytes
from fusionlab.stages import STAGES

__all__ = ["BenchReport", "BenchRow", "benchmark", "recorded_results"]

RowCallback = Callable[[BenchRow], None]
_LAUNCHING_KINDS = ("pointwise", "reduction", "matmul", "extern")


def benchmark(
    exploration: Any,
    *,
    device: str | torch.device | None = None,
    profile: str | DeviceProfile = "H200",
    callback: RowCallback | None = None,
    progress: bool = True,
    repeat: int = 20,
    workload: str | None = None,
    rounds: int | None = None,
    threads: int | None = None,
    draw_inputs: Callable[[], tuple[Any, ...]] | None = None,
) -> BenchReport:
    """Time (or model) eager, fusionlab and Inductor on the exploration's function; rows stream to `callback`.

    `device` must be where the exploration's inputs live (it defaults to that). `profile` is the GPU the
    model uses (H200, H100, A100, L4 or a DeviceProfile). `repeat` is the number of timed runs on a CPU.
    The measured programs are timed in `rounds` rounds (default 5), one after another in each round and in a
    rotated order, so that a slow spell of the machine falls on all of them; a program's time is the median of its
    rounds' medians, its fastest and slowest rounds are its row's `low_ms` and `high_ms`, and every round's figure
    is kept in `BenchReport.round_ms`. Correctness is checked first, on inputs from `draw_inputs()` (default: new
    N(0, 1) values shaped like the exploration's; a workload whose values have constraints, probabilities or a
    non-negative moment, draws its own). On a CPU, Inductor is compiled and everything is timed at `threads` threads
    (default `CPU_TIMING_THREADS`, 1), restored after; the report and its rows say how many.
    """
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    fn, inputs = exploration.fn, tuple(exploration.example_inputs)
    where = device_of(fn, inputs)
    # On a CPU one fixed thread count covers Inductor's compile (its C++ kernels keep the count in force when they
    # are compiled) and every timing; it is checked here, before any work.
    threads = None if where.type == "cuda" else check_threads(CPU_TIMING_THREADS if threads is None else threads)
    if device is not None and torch.device(device).type != where.type:
        raise ValueError(
            f"benchmark runs where the exploration's inputs are ({where}), but device={device!r} was given: "
            f"explore with inputs on {device} to benchmark there"
        )
    model = get_profile(profile)
    known = find(fn)
    name = str(workload or (known.name if known else getattr(fn, "__name__", type(fn).__name__)))
    rows: list[BenchRow] = []
    keywords = dict(exploration.example_kwargs)
    if keywords:  # eager and Inductor see the same keyword arguments as the exploration
        fn = functools.partial(exploration.fn, **keywords)

    def emit(row: BenchRow) -> None:
        rows.append(row)
        if callback is not None:
            callback(row)

    with _steps(progress, total=6, description=f"benchmark {name}") as step:
        step("correctness")
        fresh = fresh_inputs(inputs) if draw_inputs is None else draw_inputs()
        flat = exploration.flat_inputs(fresh, keywords)
        with torch.no_grad():  # eager on copies: a function that updates its inputs (an optimizer step) would
            # otherwise hand fusionlab inputs already updated, and return the very tensor fusionlab then writes
            expected = fn(*[value.clone() if isinstance(value, torch.Tensor) else value for value in fresh])
        with _cold_triton_cache():  # the first call compiles the kernels: with Triton's on-disk cache off
            start = time.perf_counter()
            actual = exploration(*fresh, **keywords)
            _synchronize(where)
            first_call = time.perf_counter() - start
        assert_outputs_close(actual, expected, f"fusionlab's program for {name}")
        fusionlab_compile = sum(getattr(exploration, stage).seconds for stage in STAGES)
        if where.type == "cuda":
            fusionlab_compile += first_call  # Triton's JIT runs on the first call

        minimal = tensor_bytes(inputs) + tensor_bytes(expected) + tensor_bytes(fn)
        if known is not None:
            minimal = known.min_bytes(inputs, expected) + tensor_bytes(fn)
        flops = count_flops(fn, fresh)
        bound = known.bound if known is not None else ("compute" if flops > 0 else "memory")
        bandwidth = measure_copy_bandwidth(where)
        shared = _Shared(where, bandwidth, model, minimal, flops, bound, threads)
        emit(shared.row("reference", "", minimal / bandwidth * 1e3, None, minimal, "modelled", str(where)))

        step("eager")

        def run_eager() -> Any:
            with torch.no_grad():
                return fn(*fresh)

        eager_launches = count_launches(run_eager, where)

        step("fusionlab")

        def run_fused() -> Any:
            with torch.no_grad():
                return exploration.compiled(*flat)

        groups = [g for g in exploration.fused.groups if g.kind in _LAUNCHING_KINDS]
        fused_bytes = sum(g.bytes_read + g.bytes_written for g in groups)
        if where.type == "cuda":
            fused_kernels, fused_launches = cuda_kernel_ms(run_fused)

        step("inductor")
        # The view first: it resets Dynamo, which would send the compiled function back to Dynamo on its next call.
        view = inductor_view(fn, inputs, captured_node_names=exploration.captured.aten_nodes)
        with _pinned(threads):
            compiled, inductor_compile = compile_inductor(fn, inputs)

        def run_inductor() -> Any:
            with torch.no_grad():
                return compiled(*fresh)

        step("timing")
        runs = {"eager": run_eager, "inductor": run_inductor}
        if where.type == "cuda":
            runs["fusionlab"] = run_fused
        rounds = rounds if rounds is not None else 5
        with _pinned(threads):
            round_ms = _interleaved(runs, where, repeat, rounds)
        median = {variant: statistics.median(times) for variant, times in round_ms.items()}

        emit(shared.program("eager", median["eager"], eager_launches, None, "measured", round_ms["eager"]))
        if where.type == "cuda":
            emit(shared.program("fusionlab", median["fusionlab"], fused_launches, fused_bytes, "measured",
                                round_ms["fusionlab"]))
            _emit_kernels(emit, shared, "fusionlab", fused_kernels, _fusionlab_kernel_bytes(exploration))
        for row in _modelled_plan(shared, "fusionlab", exploration, groups):
            emit(row)
        emit(shared.program("inductor", median["inductor"], view.launches, _view_bytes(view), "measured",
                            round_ms["inductor"]))
        if where.type == "cuda":
            per_kernel, _ = cuda_kernel_ms(run_inductor)
            kernel_bytes = {k.name: k.bytes_moved for k in view.kernels if k.bytes_moved is not None}
            _emit_kernels(emit, shared, "inductor", per_kernel, kernel_bytes)
        else:
            for kernel in view.kernels:
                emit(shared.row("inductor", kernel.name, None, 1, kernel.bytes_moved, "untimed", str(where)))

        step("model")
        if where.type != "cuda":  # Inductor's GPU plan: its Triton kernels, generated (not run) on the CPU
            view = inductor_view(fn, inputs, captured_node_names=exploration.captured.aten_nodes, cpu_backend="triton")
        emit(shared.modelled_program("inductor", _modelled_inductor_bytes(view, groups), view.launches))
        unfused = _unfused_groups(exploration)
        if unfused is not None:
            moved = sum(g.bytes_read + g.bytes_written for g in unfused)
            emit(shared.modelled_program("unfused", moved, len(unfused)))

    return BenchReport(
        workload=name,
        device=str(where),
        bound=bound,
        minimal_bytes=minimal,
        flops=flops,
        copy_bandwidth_bytes_per_s=bandwidth,
        profile=model,
        rows=tuple(rows),
        fusionlab_compile_s=fusionlab_compile,
        inductor_compile_s=inductor_compile,
        recorded=recorded_results(name),
        round_ms=round_ms,
        threads=threads,
    )


@contextlib.contextmanager
def _cold_triton_cache() -> Iterator[None]:
    """Point Triton's kernel cache at a new, empty folder, so a compile time is a cold one. The folder stays while
    the process runs (kernels compiled there may read their files again) and is removed when it ends."""
    previous = os.environ.get("TRITON_CACHE_DIR")
    folder = tempfile.mkdtemp(prefix="fusionlab-triton-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["TRITON_CACHE_DIR"] = folder
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = previous


class _Shared:
    """What every row of one benchmark is computed against."""

    def __init__(
        self, device: torch.device, bandwidth: float, profile: DeviceProfile, minimal: int, flops: int, bound: str,
        threads: int | None = None,
    ) -> None:
        self.device, self.bandwidth, self.profile = device, bandwidth, profile
        self.minimal, self.flops, self.bound, self.threads = minimal, flops, bound, threads

    def row(
        self,
        variant: str,
        kernel: str,
        milliseconds: float | None,
        launches: int | None,
        moved: int | None,
        timing: str,
        device: str,
        flops: int | None = None,
    ) -> BenchRow:
        modelled = timing == "modelled" and device == self.profile.name
        bandwidth = self.profile.memory_bandwidth_bytes_per_s if modelled else self.bandwidth
        achieved = None if moved is None or not milliseconds else moved / (milliseconds / 1e3) / 1e9
        percent = None if achieved is None else achieved * 1e9 / bandwidth * 100
        roofline = None
        if not kernel and milliseconds and variant != "reference":
            if self.bound == "compute" and self.flops:
                # A FLOP peak is known for GPUs only: a CPU's measured compute-bound row has no roofline.
                if modelled or self.device.type == "cuda":
                    roofline = self.flops / (milliseconds / 1e3) / self.profile.bf16_flops_per_s * 100
            else:
                roofline = self.minimal / (milliseconds / 1e3) / bandwidth * 100
        return BenchRow(
            variant, kernel, milliseconds, launches, moved, achieved, percent, timing, device, flops, roofline
        )

    def program(self, variant: str, ms: float, launches: int | None, moved: int | None, timing: str,
                rounds: tuple[float, ...] = ()) -> BenchRow:
        row = self.row(variant, "", ms, launches, moved, timing, str(self.device), self.flops or None)
        if not rounds:
            return row
        return dataclasses.replace(row, low_ms=min(rounds), high_ms=max(rounds), threads=self.threads)

    def modelled_program(self, variant: str, moved: int, launches: int) -> BenchRow:
        seconds = model_time(moved, launches, self.flops, self.profile)
        return self.row(variant, "", seconds * 1e3, launches, moved, "modelled", self.profile.name, self.flops or None)


def _modelled_plan(shared: _Shared, variant: str, exploration: Any, groups: list[Any]) -> Iterator[BenchRow]:
    """The program row and one row per kernel of a fusion plan, over the device profile."""
    moved = sum(g.bytes_read + g.bytes_written for g in groups)
    yield shared.modelled_program(variant, moved, len(groups))
    flops_by_node = node_flops(exploration.captured.graph_module)
    for group in groups:
        group_flops = sum(flops_by_node.get(origin, 0) for origin in group.origins)
        group_bytes = group.bytes_read + group.bytes_written
        seconds = model_time(group_bytes, 1, group_flops, shared.profile)
        yield shared.row(
            variant, group.name, seconds * 1e3, 1, group_bytes, "modelled", shared.profile.name, group_flops or None
        )


def _emit_kernels(
    emit: RowCallback, shared: _Shared, variant: str, per_kernel: dict[str, float], kernel_bytes: dict[str, int]
) -> None:
    """Measured per-kernel rows; kernels not ours (cuBLAS, copies) are summed into one "(other kernels)" row."""
    other_ms, other_count = 0.0, 0
    for kernel, milliseconds in per_kernel.items():
        if kernel in kernel_bytes:
            emit(shared.row(variant, kernel, milliseconds, 1, kernel_bytes[kernel], "measured", str(shared.device)))
        else:
            other_ms, other_count = other_ms + milliseconds, other_count + 1
    if other_count:
        emit(shared.row(variant, "(other kernels)", other_ms, other_count, None, "measured", str(shared.device)))


def _fusionlab_kernel_bytes(exploration: Any) -> dict[str, int]:
    by_group = {g.name: g.bytes_read + g.bytes_written for g in exploration.fused.groups}
    return {k.name: by_group[k.group] for k in exploration.generated.kernels if k.group in by_group}


def _unfused_groups(exploration: Any) -> list[Any] | None:
    """The plan with no fusion at all (one kernel per primitive): what eager would move, roughly."""
    try:
        plain = explore(exploration.fn, *exploration.example_inputs, policy="none", **exploration.example_kwargs)
        return [g for g in plain.fused.groups if g.kind in _LAUNCHING_KINDS]
    except Exception:  # the unfused plan is a comparison only: leave its row out rather than fail
        return None


def _modelled_inductor_bytes(view: InductorView, groups: list[Any]) -> int:
    """Inductor's own byte counts; an extern call (no count) moves what fusionlab's extern call of that node does."""
    moved = 0
    for kernel in view.kernels:
        if kernel.bytes_moved is not None:
            moved += kernel.bytes_moved
        elif kernel.language == "extern":
            moved += sum(
                g.bytes_read + g.bytes_written
                for g in groups
                if g.kind == "extern" and set(g.origins) & set(kernel.node_names)
            )
    return moved


def _view_bytes(view: InductorView) -> int | None:
    counted = [k.bytes_moved for k in view.kernels if k.bytes_moved is not None]
    return sum(counted) if counted else None


def _time(run: Callable[[], Any], device: torch.device, repeat: int) -> float:
    return median_cuda_ms(run) if device.type == "cuda" else median_wall_ms(run, repeat=repeat, warmup_s=0.02)


def _interleaved(
    runs: dict[str, Callable[[], Any]], device: torch.device, repeat: int, rounds: int
) -> dict[str, tuple[float, ...]]:
    """Each run's median time in each of `rounds` rounds; within a round the runs take turns, in an order
    rotated by one each round."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(_time(runs[name], device, repeat))
    return {name: tuple(values) for name, values in times.items()}


def _pinned(threads: int | None) -> contextlib.AbstractContextManager[Any]:
    """The CPU's fixed thread count for a block (nothing on CUDA, where `threads` is None)."""
    return contextlib.nullcontext() if threads is None else fixed_threads(threads)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def _steps(progress: bool, total: int, description: str) -> Iterator[Callable[[str], None]]:
    """A tqdm.auto bar over the benchmark's steps (when tqdm is installed and `progress` is True)."""
    bar: Any = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc=description, leave=False)
        except ImportError:
            bar = None
    started = [False]

    def step(name: str) -> None:
        if bar is not None:
            if started[0]:
                bar.update(1)
            started[0] = True
            bar.set_postfix_str(name)

    try:
        yield step
    finally:
        if bar is not None:
            bar.update(1)
            bar.close()
