"""Inductor's time per module: the model compiled by Inductor, run under torch.profiler, each kernel given to
the modules of the aten nodes it covers.

Each program Inductor generates is parsed by the adapter (`fusionlab.inductor.adapter.parse_program`), which
matches its kernels onto the aten nodes of the fusionlab graph compiled for the same Dynamo graph (Dynamo splits a
model the same way for both backends, in the same order), and those nodes carry their module. On a CPU the C++
kernels are profiled with `cpp.enable_kernel_profile` (one profiler range per kernel) and an extern call (mm,
addmm, bmm) is the i-th call of its op in the program; on CUDA the GPU's kernels are read against every launch of
the programs in order (`parse_program(per_call=True)`: a kernel Inductor launches for each identical layer is each
layer's at its place; cuBLAS's kernels go to the extern call whose aten op launched them). Time the profile cannot
attribute (allocations, the wrapper's Python, a kernel that matches no launch) is kept apart as unattributed, never
spread over modules.

    >>> times = inductor_times(step, explorations, rounds=3, device=torch.device("cpu"))
    >>> times.per_module["transformer.h.0.mlp"]          # ms per round
"""

from __future__ import annotations

import collections
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlab.fusion.fuse import common_module
from fusionlab.inductor.adapter import parse_program
from fusionlab.inductor.records import InductorKernel
from fusionlab.measure.timing import quiet_cuda_toolkit_lookup
from fusionlab.profile.cuda import GpuKernel, collective_of, kernels_of, launch_times
from fusionlab.profile.profiler import quiet_profile

__all__ = ["InductorTimes", "inductor_times"]

_CALL = "## Call CompiledFxGraph"
_PROFILED_KERNEL = re.compile(r"^graph_\d+_(?P<name>.+)$")


@dataclass
class InductorTimes:
    """Inductor's per-module times over rounds (ms, each module's own kernels: not yet summed over children)."""

    rounds: list[dict[str, float]] = field(default_factory=list)  # module -> ms, one dict per round
    total: list[float] = field(default_factory=list)  # the graphs' calls (CPU) or their kernels (CUDA), per round
    unattributed: list[float] = field(default_factory=list)
    kernels: list[tuple[int, InductorKernel, str]] = field(default_factory=list)  # (program, kernel, module)
    compile_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    by_module: bool = True  # False: too much of the time has no module; only the model's row is given

    @property
    def per_module(self) -> dict[str, list[float]]:
        """Module -> its own kernels' ms in each round (0 in a round that ran none of them)."""
        modules = {module for values in self.rounds for module in values}
        return {module: [values.get(module, 0.0) for values in self.rounds] for module in sorted(modules)}


def _module_of(kernel: InductorKernel, modules: dict[str, str], claims: collections.Counter[str]) -> str:
    """The modules a kernel's nodes share. A node several kernels claim (an extern addmm's alias `mm` matched onto
    one mm of the graph) says nothing about this one: it counts only when the kernel has no other node."""
    own = [name for name in kernel.node_names if claims[name] == 1] or list(kernel.node_names)
    found = [modules[name] for name in own if modules.get(name)]
    return common_module(found) if found else ""


def inductor_times(step: Callable[[], Any], explorations: Sequence[Any], *, rounds: int,
                   device: torch.device) -> InductorTimes:
    """Compile `step` (which calls a `torch.compile(model)` made with Inductor) on its first call, then profile
    `rounds` calls. `explorations` are fusionlab's graphs of the same model in the order they were compiled."""
    import time

    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    quiet_cuda_toolkit_lookup()
    result = InductorTimes()
    settings: dict[str, Any] = {
        "force_disable_caches": True,  # a cached graph would come back without its generated source
        "cpp.enable_kernel_profile": True,  # each C++ kernel is a profiler range named graph_<n>_<kernel>
        "cpp.descriptive_names": "original_aten",
        "triton.descriptive_names": "original_aten",
    }
    start = time.perf_counter()
    with config.patch(settings), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, codes = run_and_get_code(step)
    result.compile_s = time.perf_counter() - start
    matched = len(codes) == len(explorations)
    if not matched:
        result.by_module = False  # every kernel would land in the model's row, and each module read 0
        result.notes.append(f"Inductor made {len(codes)} programs where fusionlab made {len(explorations)} graphs: "
                            "its kernels are not matched to modules; its whole step is the model's row")
    programs: list[tuple[InductorKernel, ...]] = []
    launches: list[tuple[tuple[str, bool], str]] = []  # CUDA: every launch in order, ((name, extern), its module)
    for index, code in enumerate(codes):
        nodes = explorations[index].captured.aten_nodes if matched else None
        modules = {node.name: node.module for node in nodes} if nodes is not None else {}
        program = parse_program(code, nodes)
        programs.append(program)
        result.kernels.extend((index, kernel, module) for kernel, module in zip(program, _owners(program, modules)))
        if device.type == "cuda":
            calls = parse_program(code, nodes, per_call=True)
            launches.extend(zip((_launch_name(index, place, call) for place, call in enumerate(calls)),
                                _owners(calls, modules)))
    owner = {(index, kernel.name): module for index, kernel, module in result.kernels}

    step()  # the call after the compile still pays one-time costs (the first profiled round was 100x slower)
    for _ in range(rounds):
        profiler = _profiled(step, device)
        per_module: dict[str, float] = collections.defaultdict(float)
        if device.type == "cuda":
            total, unattributed = _attribute_cuda(kernels_of(profiler), launches, per_module)
        else:
            total, unattributed = _attribute_cpu(list(profiler.events()), programs, owner, per_module)
        per_module[""] += unattributed  # the model's own row holds what no module's kernels explain
        result.rounds.append(dict(per_module))
        result.total.append(total)
        result.unattributed.append(unattributed)
    share = sum(result.unattributed) / sum(result.total) if sum(result.total) else 0.0
    if device.type == "cuda" and share > 0.05 and result.by_module:
        result.by_module = False
        result.notes.append(
            f"Inductor's time per module is not given on CUDA: {100 * share:.0f}% of its GPU time is in kernels "
            "that matched none of its launches, so a layer's figure would be a part of it; its whole step is the "
            "model's row")
    return result


def _owners(kernels: Sequence[InductorKernel], modules: dict[str, str]) -> list[str]:
    """The module of each kernel (or launch) of one program, its nodes' claims counted over the program."""
    claims = collections.Counter(name for kernel in kernels for name in set(kernel.node_names))
    return [_module_of(kernel, modules, claims) for kernel in kernels]


def _launch_name(program: int, place: int, call: InductorKernel) -> tuple[str, bool]:
    """A launch as `fusionlab.profile.cuda.launch_times` reads a program: a Triton kernel by its name (the GPU
    event's), an extern call by the aten op whose host event launches its library kernels."""
    if call.language != "extern":
        return call.name, False
    op = call.aten_ops[0] if call.aten_ops else "unknown"
    return f"inductor_{program}_{place}_aten_{op}", True


def _profiled(step: Callable[[], Any], device: torch.device) -> Any:
    """The finished profiler of one call of `step`."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with quiet_profile(activities) as profiler:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return profiler


def _attribute_cpu(events: list[Any], programs: list[tuple[InductorKernel, ...]],
                   owner: dict[tuple[int, str], str], per_module: dict[str, float]) -> tuple[float, float]:
    """Each graph call's children, in order: C++ kernels by name, extern calls by op and order."""
    calls = sorted((e for e in events if e.name.startswith(_CALL)), key=lambda e: e.time_range.start)
    total = sum(e.time_range.elapsed_us() for e in calls) / 1e3
    if len(calls) != len(programs):
        return total, total
    attributed = 0.0
    for index, call in enumerate(calls):
        externs: dict[str, list[InductorKernel]] = collections.defaultdict(list)
        for kernel in programs[index]:
            if kernel.language == "extern" and kernel.aten_ops:
                externs[kernel.aten_ops[0]].append(kernel)
        seen: collections.Counter[str] = collections.Counter()
        for child in sorted(call.cpu_children, key=lambda e: e.time_range.start):
            profiled = _PROFILED_KERNEL.match(child.name)
            name = None
            if profiled:
                name = profiled["name"]
            elif child.name.startswith("aten::"):
                op = child.name.removeprefix("aten::")
                if seen[op] < len(externs.get(op, ())):
                    name = externs[op][seen[op]].name
                seen[op] += 1
            if name is None or (index, name) not in owner:
                continue
            milliseconds = child.time_range.elapsed_us() / 1e3
            per_module[owner[(index, name)]] += milliseconds
            attributed += milliseconds
    return total, max(0.0, total - attributed)


def _attribute_cuda(kernels: list[GpuKernel], launches: list[tuple[tuple[str, bool], str]],
                    per_module: dict[str, float]) -> tuple[float, float]:
    """Each GPU kernel given to the launch of Inductor's programs it belongs to, in program order (a Triton kernel
    by name and place, so that the one kernel Inductor launches for every identical layer is told apart; a library
    kernel by the aten op that launched it), and so to that launch's module. Collectives are in neither figure."""
    kernels = [k for k in kernels if not collective_of(k.name)]
    total = sum(k.end - k.start for k in kernels) / 1e3
    if not launches:
        return total, total
    reading = launch_times([launch for launch, _ in launches], kernels, calls=1)
    if reading.skipped:  # the programs ran in another order than compiled: no kernel's place can be trusted
        return total, total
    attributed = 0.0
    for index, microseconds in reading.times.items():
        per_module[launches[index][1]] += microseconds / 1e3
        attributed += microseconds / 1e3
    return total, max(0.0, total - attributed)
