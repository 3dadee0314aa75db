"""Reading the CUDA profiler: each GPU kernel with the host ranges that launched it.

A kernel's device event is linked (by correlation id) to the host event that was innermost when it was launched;
walking that event's parents gives the ranges around the launch: a module's `record_function` range
(`fusionlab.profile.eager`), a backward call. Times are µs, as the profiler gives them.

    >>> kernels = kernels_of(profiler)          # gpu_kernels(profiler.events(), device_links(profiler))
    >>> kernels[0].name, kernels[0].module
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from fusionlab.measure.timing import is_device_kernel
from fusionlab.profile.eager import RANGE_PREFIX

__all__ = ["GpuKernel", "Launches", "collective_of", "collectives_text", "collectives_us", "device_links",
           "gpu_kernels", "host_ms_by_module", "kernel_us_by_name", "kernels_of", "launch_times", "module_gpu_ms"]


@dataclass(frozen=True)
class GpuKernel:
    """One kernel the GPU ran: its name, start and end (µs) and the innermost module range that launched it."""

    name: str
    start: float
    end: float
    module: str | None  # None: launched outside every module range
    launchers: tuple[str, ...] = ()  # the host events around its launch, innermost first ("aten::addmm", ...)
    op: int | None = None  # the id of the outermost aten op around its launch: one call, whatever it launched


class Launches(NamedTuple):
    """`launch_times`'s reading: µs per call of each launch, µs per call left over, and how many generated kernels
    were found past launches of the program that never ran (the GPU ran the programs in another order), and how many
    kernels with no host event were placed by their position alone."""

    times: dict[int, float]
    left: float
    skipped: int
    placed: int = 0  # kernels with no host event at all, given to the extern launch at their place in the stream


#: extern ops whose kernels may have no host event in the profile (cuDNN's attention launches through the driver)
_DRIVER_LAUNCHED = re.compile(r"attention")

#: the CUDA runtime's and driver's host events (cudaLaunchKernel, cuLaunchKernelEx, ...): not the user's ops
_RUNTIME = re.compile(r"^(cuda[A-Z]|cu[A-Z])")


def device_links(profiler: Any) -> dict[int, int]:
    """Each GPU kernel's id (CUPTI's correlation id, which its FunctionEvent's `id` is) -> the correlation id of the
    op that launched it, read from Kineto's own events: torch before 2.13 leaves `linked_correlation_id` off its
    FunctionEvents. The GPU timeline's annotation spans are left out (their ids are numbered apart)."""
    from torch.autograd import DeviceType

    results = getattr(getattr(profiler, "profiler", None), "kineto_results", None)
    if results is None:
        return {}
    return {event.correlation_id(): event.linked_correlation_id() for event in results.events()
            if event.device_type() == DeviceType.CUDA and not event.is_user_annotation()}


def gpu_kernels(events: Iterable[Any], links: Mapping[int, int] | None = None) -> list[GpuKernel]:
    """Every CUDA kernel event (copies, memsets and annotation spans left out), in start order, with its launching
    module. `links` (`device_links(profiler)`) gives the launching op where the events do not carry it."""
    from torch.autograd import DeviceType

    events = list(events)
    # The ops and ranges the user's code opened, by their correlation id. The CUDA runtime's own host events
    # (cudaLaunchKernel) carry CUPTI's correlation ids, numbered apart from the ops' and so colliding with them:
    # keyed together, a kernel would be given to whichever came last.
    host = {event.id: event for event in events
            if event.device_type == DeviceType.CPU and not getattr(event, "linked_correlation_id", 0)
            and not _RUNTIME.match(event.name)}
    # A kernel and the runtime call that launched it (cudaLaunchKernel, cuLaunchKernelEx) share CUPTI's id, and that
    # call sits in the host tree inside the op that made it: the first way from a kernel to its op and module.
    runtime = {event.id: event for event in events
               if event.device_type == DeviceType.CPU and _RUNTIME.match(event.name) and "Launch" in event.name}
    kernels = []
    for event in events:
        if not is_device_kernel(event):
            continue
        launch = runtime.get(event.id)
        launcher = launch.cpu_parent if launch is not None else None
        if launcher is None:  # else the op the kernel's linked correlation id names
            linked = getattr(event, "linked_correlation_id", None)
            if linked is None and links:
                linked = links.get(event.id)
            launcher = host.get(linked) if linked else None
        module = None
        launchers = []
        op = None
        while launcher is not None:
            if module is None and launcher.name.startswith(RANGE_PREFIX):
                module = launcher.name[len(RANGE_PREFIX):]
            if launcher.name.startswith("aten::"):
                op = launcher.id
            launchers.append(launcher.name)
            launcher = launcher.cpu_parent
        kernels.append(GpuKernel(event.name, event.time_range.start, event.time_range.end, module, tuple(launchers),
                                 op))
    return sorted(kernels, key=lambda k: k.start)


def kernels_of(profiler: Any) -> list[GpuKernel]:
    """The GPU kernels of a finished `torch.profiler.profile`, each with its launching op and module."""
    return gpu_kernels(profiler.events(), device_links(profiler))


def module_gpu_ms(kernels: Sequence[GpuKernel]) -> dict[str, float]:
    """Each module's own GPU milliseconds: the kernels whose innermost launching range is that module."""
    totals: dict[str, float] = collections.defaultdict(float)
    for kernel in kernels:
        if kernel.module is not None:
            totals[kernel.module] += (kernel.end - kernel.start) / 1e3
    return dict(totals)


def host_ms_by_module(events: Iterable[Any]) -> dict[str, float]:
    """Each module's inclusive host milliseconds: its ranges' durations on the CPU."""
    totals: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.name.startswith(RANGE_PREFIX):
            totals[event.name[len(RANGE_PREFIX):]] += event.time_range.elapsed_us() / 1e3
    return dict(totals)


def kernel_us_by_name(kernels: Sequence[GpuKernel], calls: int) -> dict[str, float]:
    """Mean µs per call of each kernel name over `calls` calls."""
    totals: dict[str, float] = collections.defaultdict(float)
    for kernel in kernels:
        totals[kernel.name] += kernel.end - kernel.start
    return {name: total / calls for name, total in totals.items()}


def _calls_op(launch: str, kernel: GpuKernel) -> bool:
    """Whether an extern launch ("extern_2_aten_addmm_default") is the aten op one of the kernel's host events is."""
    ops = {name.removeprefix("aten::") for name in kernel.launchers if name.startswith("aten::")}
    return any(f"_aten_{op}_" in launch + "_" or launch.endswith(f"_aten_{op}") for op in ops)


def launch_times(program: Sequence[tuple[str, bool]], kernels: Sequence[GpuKernel], calls: int) -> Launches:
    """µs per call of each launch of `program` ((name, is extern) in launch order, every graph of a step in the
    order they run), read from the GPU kernels of `calls` steps run back to back, and the µs per call left over.

    A generated kernel is found by its name, the next one of that name in the program; a kernel of another name
    (cuBLAS's, flash attention's) belongs to the extern launch at that point of the program whose aten op is one of
    its host events (an extern may launch several kernels, all under one op call: a kernel under another call of
    the same op is the next launch's), or, when the profile has no host event for it at all, the one extern launch
    between the generated kernels around it if that is an attention op (cuDNN's launch through the driver). What
    matches nothing is left over, not guessed."""
    times: dict[int, float] = collections.defaultdict(float)
    left = 0.0
    skipped = placed = 0
    size = len(program)
    generated = {name for name, extern in program if not extern}
    position = 0  # the program's launch the stream has reached (cyclic: the steps run back to back)
    current: int | None = None  # the op call the extern launch at `position` has matched kernels of
    for kernel in kernels:
        if collective_of(kernel.name):  # NCCL's, launched by DDP or FSDP between our graphs: `collectives_us`
            continue
        start = position
        if (size and kernel.name not in generated and program[position][1] and current is not None
                and kernel.op is not None and kernel.op != current):
            start = (position + 1) % size  # that extern's call is over: this kernel is a later launch's
        found = None
        if (size and not kernel.launchers and kernel.name not in generated and current is None
                and program[position][1] and _DRIVER_LAUNCHED.search(program[position][0])
                and not program[(position + 1) % size][1]):
            # No host event launched it in the profile (cuDNN's attention backward launches through the driver). The
            # stream runs in launch order, and the stream has reached an extern launch that has had no kernel yet,
            # alone between two generated ones: the kernel is its. Anywhere else it is left over.
            times[position] += kernel.end - kernel.start
            placed += 1
            continue
        for offset in range(size):
            index = (start + offset) % size
            name, extern = program[index]
            if kernel.name in generated:
                if not extern and name == kernel.name:
                    found = index
                    break
            elif not extern:  # an extern's kernel never lies past the next generated kernel
                break
            elif _calls_op(name, kernel):
                found = index
                break
        if found is None:
            left += kernel.end - kernel.start
            continue
        if not program[found][1]:
            skipped += sum(1 for step in range(offset) if not program[(start + step) % size][1])
        times[found] += kernel.end - kernel.start
        position, current = (found, kernel.op) if program[found][1] else ((found + 1) % size, None)
    return Launches({index: value / calls for index, value in times.items()}, left / calls, skipped, placed)


_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_(?P<kind>[A-Za-z]+)")


def collective_of(kernel_name: str) -> str | None:
    """The collective an NCCL kernel runs ("AllReduce", "AllGather", "ReduceScatter", ...), None for another kernel."""
    match = _NCCL.match(kernel_name)
    return match["kind"] if match else None


def collectives_us(kernels: Sequence[GpuKernel], calls: int) -> dict[str, tuple[float, float]]:
    """Each collective's (launches, µs) per call: the NCCL kernels DDP's all-reduces and FSDP's all-gathers and
    reduce-scatters run on the GPU between our kernels."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for kernel in kernels:
        kind = collective_of(kernel.name)
        if kind is not None:
            totals[kind][0] += 1
            totals[kind][1] += kernel.end - kernel.start
    return {kind: (count / calls, total / calls) for kind, (count, total) in totals.items()}


def collectives_text(found: dict[str, tuple[float, float]]) -> str:
    """`collectives_us`'s reading as a note's words: "AllGather x4 0.31 ms, ReduceScatter x2 0.2 ms"."""
    return ", ".join(f"{kind} x{count:g} {us / 1e3:.3g} ms" for kind, (count, us) in sorted(found.items()))
