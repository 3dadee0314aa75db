"""`fl.profile(model, *inputs)`: a whole model through the fusionlab backend, eager and Inductor, module by module.

    >>> from fusionlab import models
    >>> model, inputs = models.build("gpt2", size="tiny")
    >>> prof = fl.profile(model, **inputs)                  # inference: model.eval() for the profile, mode restored
    >>> prof.modules.sort_values("eager_ms").tail()         # pandas DataFrame over the module tree
    >>> prof.trace("gpt2.json")                             # open in ui.perfetto.dev

The model runs through `torch.compile(model, backend="fusionlab")`, so its graphs are Dynamo's (graph breaks are
real breaks, with the reason and the user's line), split by AOTAutograd into forward and backward in training.
On CUDA every time comes from the CUDA profiler; on a CPU eager and Inductor are measured per module over several
rounds at a fixed thread count (median and spread) and fusionlab's kernels, which run under Triton's interpreter
there, are modelled on a GPU profile and labelled so.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fusionlab import dynamo_backend
from fusionlab.measure.devices import DeviceProfile, get_profile
from fusionlab.measure.timing import device_of
from fusionlab.models.zoo import loss_of
from fusionlab.profile import cuda
from fusionlab.profile.eager import ModuleClock, eager_rounds, fixed_threads
from fusionlab.profile.inductor_times import InductorTimes, inductor_times
from fusionlab.profile.kernels import KernelRecord, kernel_records, launched, modelled_timeline
from fusionlab.profile.model_profile import ModelProfile
from fusionlab.profile.modules import inclusive, module_rows
from fusionlab.profile.profiler import quiet_profile
from fusionlab.profile.records import GraphProfile, Spread, parse_break
from fusionlab.profile.timeline import annotate_trace, modelled_trace
from fusionlab.profile.verdict import verdict_of

__all__ = ["profile"]

Step = Callable[[], Any]


def _step(model: torch.nn.Module, run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
          train: bool) -> Step:
    if not train:
        def infer() -> Any:
            with torch.no_grad():
                return run(*args, **kwargs)
        return infer
    parameters = [p for p in model.parameters() if p.requires_grad]

    def step() -> Any:
        for parameter in parameters:
            parameter.grad = None
        loss = loss_of(run(*args, **kwargs))
        loss.backward()
        return loss.detach()
    return step


def _synchronised(step: Step, device: torch.device) -> Step:
    if device.type != "cuda":
        return step

    def run() -> Any:
        result = step()
        torch.cuda.synchronize(device)
        return result
    return run


def _dropout(model: torch.nn.Module) -> list[str]:
    return [path for path, module in model.named_modules()
            if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0]


def _saved(graph: dynamo_backend.BackendGraph) -> tuple[int, tuple[str, ...]]:
    """The backward graph's inputs that are neither parameters and inputs (primals_*) nor gradients
    (tangents_*): the activations its forward graph saved for it."""
    total, names = 0, []
    for node in graph.graph_module.graph.nodes:
        if node.op != "placeholder" or node.name.startswith(("primals", "tangents")):
            continue
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            elements = 1
            for size in value.shape:
                elements *= dynamo_backend.hint_int(size)
            total += elements * value.element_size()
            names.append(node.name)
    return total, tuple(names)


def profile(model: torch.nn.Module, *inputs: Any, train: bool = False, rounds: int = 5, threads: int | None = 1,
            inductor: bool = True, device_profile: str | DeviceProfile = "H200", **kwargs: Any) -> ModelProfile:
    """Profile `model(*inputs, **kwargs)`: its Dynamo graphs through fusionlab, and eager, fusionlab and Inductor
    time per module and per kernel.

    `train=False` profiles inference: under `torch.no_grad()` with `model.eval()` (dropout off), the model's mode
    restored after. `train=True` profiles a training step (the output's `.loss`, else the mean of its first tensor,
    then `.backward()`) in train mode. `rounds` timed rounds per figure, at `threads` intra-op threads on a CPU
    (None: leave the count); `inductor=False` leaves Inductor out (its compile is the slow part on a CPU);
    `device_profile` is the GPU fusionlab's kernels are modelled on when there is none. Resets Dynamo first
    (`torch._dynamo.reset()`), so that the model's graphs are compiled afresh: other compiled functions recompile
    on their next call.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"fl.profile profiles an nn.Module, got {type(model).__name__}: wrap the function in a "
                        "module, or use fl.explore(fn, *inputs) for a function")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    device = device_of(model, inputs + tuple(kwargs.values()))
    gpu = get_profile(device_profile)
    notes: list[str] = []
    was_training = model.training
    model.train(train)
    if was_training and not train:
        notes.append("the model was in train mode: it was profiled in eval mode (dropout off, as inference runs), "
                     "and put back in train mode after; pass train=True to profile a training step")
    if train and _dropout(model):
        notes.append(f"dropout draws random numbers in train mode ({', '.join(_dropout(model)[:3])}"
                     f"{', ...' if len(_dropout(model)) > 3 else ''}): it runs as an extern op between kernels; "
                     "build the model with dropout 0 to profile the rest alone")
    try:
        with fixed_threads(threads if device.type == "cpu" else None) as used:
            return _profile(model, inputs, kwargs, train=train, rounds=rounds, device=device, gpu=gpu,
                            inductor=inductor, notes=notes, threads=used)
    finally:
        model.train(was_training)


def _inner(model: torch.nn.Module, notes: list[str]) -> torch.nn.Module:
    """The module whose tree the profile reads: a DistributedDataParallel's own module (Dynamo names the graphs' nodes
    by the paths inside it; FSDP2 shards the model in place and needs nothing)."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        notes.append(f"profiled inside DistributedDataParallel: the module paths are its module's "
                     f"({type(model.module).__name__}); its all-reduces run in the backward, between our kernels")
        return model.module
    return model


def _profile(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, train: bool, rounds: int,
             device: torch.device, gpu: DeviceProfile, inductor: bool, notes: list[str], threads: int
             ) -> ModelProfile:
    torch._dynamo.reset()  # else a model compiled before (by an earlier profile) compiles no new graph
    tree = _inner(model, notes)
    before = dynamo_backend.mark()
    ours = torch.compile(model, backend="fusionlab")
    our_step = _synchronised(_step(model, ours, args, kwargs, train), device)
    eager_step = _synchronised(_step(model, model, args, kwargs, train), device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        our_step()
        compiled = dynamo_backend.since(before)
        if not compiled:
            raise RuntimeError(f"torch.compile(backend='fusionlab') compiled no graph of {type(model).__name__}: "
                               "Dynamo ran it all in Python (see torch._dynamo.explain(model)(...) for why)")
        on_cuda = device.type == "cuda"
        measured: dict[str, dict[str, float]] | None = None
        trace: dict[str, Any] | None = None
        session: list[cuda.GpuKernel] = []
        host: dict[str, float] | None = None
        cuda_rounds: list[dict[str, float]] = []
        unmatched_ms = 0.0
        if on_cuda:
            measured, host, cuda_rounds, trace, session, more, unmatched_ms = _cuda_session(
                tree, eager_step, our_step, compiled, rounds, train=train)
            notes.extend(more)
        records_by_graph: list[tuple[Any, list[KernelRecord]]] = []
        for graph in compiled:
            records = kernel_records(graph.exploration, graph=graph.name, role=graph.role, profile=gpu,
                                     measured_us=measured[graph.name] if measured is not None else None)
            records_by_graph.append((graph, records))
        eager_per_round, walls, spans = eager_rounds(tree, eager_step, rounds)
        if on_cuda:  # eager's figure per module is its GPU time; the hooks' wall times are the host's
            eager_per_round = cuda_rounds
        inductor_result: InductorTimes | None = None
        if inductor:
            compiled_inductor = torch.compile(model)
            try:
                inductor_result = inductor_times(_synchronised(_step(model, compiled_inductor, args, kwargs, train),
                                                               device), [g.exploration for g in compiled],
                                                 rounds=rounds, device=device)
                notes.extend(inductor_result.notes)
            except Exception as error:  # noqa: BLE001 - the rest of the profile stands; the note says what failed
                notes.append(f"Inductor failed on this model ({type(error).__name__}: {str(error)[:200]}): its "
                             "columns are empty; profile with inductor=False to skip it")

    saved = {g.index: _saved(g) for g in compiled if g.role == "backward"}
    graphs = []
    for graph, records in records_by_graph:
        if on_cuda:
            verdict = _measured_verdict(records, session, device)
        else:
            _, intervals = modelled_timeline(records, gpu)
            verdict = verdict_of(intervals, modelled=True, device=gpu.name)
        saved_bytes, saved_names = saved.get(graph.index, (0, ()))
        graphs.append(GraphProfile(
            index=graph.index, role=graph.role, exploration=graph.exploration, ended_by=parse_break(graph.ended_by),
            verdict=verdict, kernels=sum(1 for r in records if r.kind != "extern"),
            externs=sum(1 for r in records if r.kind == "extern"),
            saved_bytes=saved_bytes if graph.role in ("forward", "backward") else 0, saved=saved_names))
    kernels = [record for _, records in records_by_graph for record in records]
    fusionlab_timing = "measured (CUDA profiler)" if on_cuda else f"modelled on {gpu.name}"
    eager_note = ("measured (CUDA profiler)" if on_cuda else
                  f"measured on the CPU, wall time, {threads} thread{'s' * (threads != 1)}")
    eager_medians = {k: v.median for k, v in _spreads(eager_per_round).items()}
    rows = module_rows(tree, kernels=kernels, fusionlab_timing=fusionlab_timing, eager=eager_per_round,
                       inductor=inductor_result.rounds if inductor_result else (),
                       host=host if on_cuda else eager_medians, gpu=eager_medians if on_cuda else None,
                       inductor_by_module=inductor_result.by_module if inductor_result else True,
                       unmatched_ms=unmatched_ms)
    if trace is None:
        trace = modelled_trace([(g.name, r) for g, r in records_by_graph], spans, profile=gpu,
                               model_name=type(tree).__name__, eager_note=eager_note)
    else:
        trace = annotate_trace(trace, kernels)
    if train:
        notes.append("eager's per-module times are the forward calls (module hooks); the model's own row is the "
                     "whole training step, backward included")
    return ModelProfile(
        model_name=type(tree).__name__, train=train, device=str(device), device_profile=gpu,
        graphs=tuple(graphs), module_rows=tuple(rows), kernel_rows=tuple(r.row() for r in kernels),
        eager=Spread.of(walls),
        inductor=Spread.of(inductor_result.total) if inductor_result and inductor_result.total else None,
        inductor_unattributed=Spread.of(inductor_result.unattributed) if inductor_result else None,
        timing=(f"eager {eager_note}; fusionlab {fusionlab_timing}; Inductor "
                + ("measured (CUDA profiler)" if on_cuda else "measured on the CPU (torch.profiler ranges)")
                + " per kernel, each kernel counted at the module its aten nodes share (a kernel spanning modules "
                  "counts at their common parent)"
                + f"; {rounds} round{'s' * (rounds != 1)}, median (fastest-slowest)"),
        notes=tuple(notes), trace_events=trace, threads=threads if not on_cuda else None, rounds=rounds,
        unmatched_ms=unmatched_ms)


def _spreads(per_round: list[dict[str, float]]) -> dict[str, Spread]:
    paths = {path for values in per_round for path in values}
    return {path: Spread.of(values.get(path, 0.0) for values in per_round) for path in paths}


def _measured_verdict(records: list[KernelRecord], kernels: list[cuda.GpuKernel], device: torch.device) -> Any:
    """The GPU kernels that ran between this graph's first and last kernel (externs included), in the traced step."""
    names = {r.kernel for r in records if r.kind != "extern"}
    mine = [k for k in kernels if k.name in names]
    name = torch.cuda.get_device_name(device)
    if not mine:
        return verdict_of([], modelled=False, device=name)
    start, end = min(k.start for k in mine), max(k.end for k in mine)
    return verdict_of([(k.start, k.end) for k in kernels if k.end > start and k.start < end], modelled=False,
                      device=name)


def _cuda_session(model: torch.nn.Module, eager_step: Step, our_step: Step,
                  compiled: list[dynamo_backend.BackendGraph], rounds: int, *, train: bool
                  ) -> tuple[dict[str, dict[str, float]], dict[str, float], list[dict[str, float]], dict[str, Any],
                             list[cuda.GpuKernel], list[str], float]:
    """On CUDA: each graph's launches' µs per call (graph -> kernel name -> µs; extern calls too), eager's host ms
    per module (median) and GPU ms per module and round (inclusive), one step of eager and fusionlab traced, notes,
    and the ms per step of fusionlab's GPU kernels that matched no launch (they count in the model's row).
    Collectives (NCCL's kernels) are in neither side's totals: a note gives them."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    notes = []
    eager_step()
    with quiet_profile(activities) as profiler:
        for _ in range(rounds):
            our_step()
    program = [(graph.name, name, group.kind == "extern") for graph in compiled
               for group, name in launched(graph.exploration)]
    ours = cuda.kernels_of(profiler)
    per_launch, left, skipped, placed = cuda.launch_times([(name, extern) for _, name, extern in program], ours,
                                                          rounds)
    if placed:
        notes.append(f"{placed / rounds:g} GPU kernels per step had no launch event in the profile (cuDNN's attention "
                     "backward launches through the driver): each counts for the one extern launch between the "
                     "generated kernels around it")
    if skipped:
        notes.append(f"{skipped} of fusionlab's kernel launches per reading were passed over: the GPU ran its graphs "
                     "in an order other than the one they were compiled in, so some kernels' times may be another "
                     "launch's of the same name")
    collectives = cuda.collectives_us(ours, rounds)
    if collectives:
        notes.append("collectives between fusionlab's kernels, per step: " + cuda.collectives_text(collectives))
    measured: dict[str, dict[str, float]] = {graph.name: {} for graph in compiled}
    for index, (graph_name, name, _) in enumerate(program):
        if index in per_launch:
            measured[graph_name][name] = per_launch[index]
    total = sum(per_launch.values()) + left
    if total and left > 0.05 * total:
        notes.append(f"{left:.3g} µs per step of GPU kernels ({100 * left / total:.0f}%) matched no launch of "
                     "fusionlab's programs: counted in the model's row, in no module's or kernel's")
    eager_per_round: list[dict[str, float]] = []
    host_per_round: list[dict[str, float]] = []
    paths = [path for path, _ in model.named_modules()]
    orphans = 0.0
    eager_collectives: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):  # one profile per round, so that each round is a sample of the spread
        with ModuleClock(model, ranges=True), quiet_profile(activities) as profiler:
            eager_step()
        kernels = cuda.kernels_of(profiler)
        host_per_round.append(cuda.host_ms_by_module(profiler.events()))
        # collectives apart, as on fusionlab's side (FSDP's all-gathers run in the parent's range)
        computing = [k for k in kernels if not cuda.collective_of(k.name)]
        eager_per_round.append(inclusive(cuda.module_gpu_ms(computing), paths))
        # the model's own row: every kernel of the step (a backward's kernels are launched outside the modules)
        eager_per_round[-1][""] = sum(k.end - k.start for k in computing) / 1e3
        orphans = sum(k.end - k.start for k in computing if not k.module) / 1e3
        eager_collectives = cuda.collectives_us(kernels, 1)
    if eager_collectives:
        notes.append("collectives in eager's step: " + cuda.collectives_text(eager_collectives))
    if not train and eager_per_round and orphans > 0.05 * eager_per_round[-1][""]:
        notes.append(f"{orphans:.3g} ms of eager's {eager_per_round[-1]['']:.3g} ms of GPU kernels per step were "
                     "launched where no module's profiler range could be found around them: they count only in the "
                     "model's row, so a module's eager GPU figure can be short of its kernels")
    with quiet_profile(activities) as profiler:
        with ModuleClock(model, ranges=True):
            eager_step()
        our_step()  # without the hooks: Dynamo guards on a module's hooks and would recompile the model with them
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    session = cuda.kernels_of(profiler)
    host = {path: Spread.of(r.get(path, 0.0) for r in host_per_round).median for path in paths}
    return measured, host, eager_per_round, trace, session, notes, left / 1e3
