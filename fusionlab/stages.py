"""The five stage objects, each reached by one verb on the previous one, as in `jit(f).trace(x).lower().compile()`:

    >>> captured = capture(torch.softmax, torch.randn(4, 8), -1)
    >>> fused = captured.decompose().fuse("default")
    >>> fused
    Fused(policy='default', 1 kernel, 0 extern, 6 decisions)
    >>> compiled = fused.generate().compile()

Each verb times its own work (`seconds`) and returns the next stage with `.previous` set to the one it was called
on. Every stage is immutable and answers the same calls: `as_text()` (a program headed by the pass that made it),
a short `__repr__`, `_repr_html_()` (static HTML, readable without widgets), `.show()` (its widget) and `.previous`.
`fusionlab.explore` caches one of each.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionlab.capture import AtenNode, CaptureResult, InputSpec
from fusionlab.capture import capture as capture_graph
from fusionlab.codegen.kernel import KernelSource
from fusionlab.codegen.program import KERNEL_PREAMBLE, Program, generate_program
from fusionlab.decompose import DecomposeResult, Rule, decomposition_rules, reference
from fusionlab.decompose import decompose as decompose_graph
from fusionlab.fusion.fuse import FuseResult, FusionDecision, FusionGroup
from fusionlab.fusion.fuse import fuse as fuse_graph
from fusionlab.fusion.policy import Policy, resolve_policy
from fusionlab.ir import Graph, Node, where_text
from fusionlab.names import comment
from fusionlab.runtime.launch import KernelHandle
from fusionlab.runtime.runnable import LaunchRecord, Runnable

STAGES = ("captured", "decomposed", "fused", "generated", "compiled")
"""The stage names in pipeline order: each is an `Exploration` attribute holding that stage object."""


def _html(stage: Any) -> str:
    title = html.escape(repr(stage))
    body = html.escape(stage.as_text())
    return (f"<details open><summary><code>{title}</code></summary>"
            f"<pre style='font-size:12px;line-height:1.3'>{body}</pre></details>")


def _rename_words(text: str, names: dict[str, str]) -> str:
    """Replace whole identifiers only (`arg0_1` must not rewrite `arg0_10`)."""
    return re.sub(r"\b\w+\b", lambda match: names.get(match.group(0), match.group(0)), text)


def _header(made: str, stage: Any) -> str:
    """The first line of a printed stage, as a Thunder trace starts: the pass that made it, its time, its input."""
    source = f" from {stage.previous!r}" if stage.previous is not None else ""
    return f"# {made} in {stage.seconds:.2f} s{source}"


class _Places:
    """Heads each run of lines from one module and source line with `# in <module> (<file:line in function>)`, as
    Thunder's traces head each region, so a 12-layer model reads layer by layer."""

    def __init__(self, lines: list[str], indent: str = "    ") -> None:
        self.lines = lines
        self.indent = indent
        self.last = ""

    def add(self, line: str, module: str, source: str) -> None:
        where = where_text(module, source)
        self.add_at(line, f"in {where}" if module else where)

    def add_at(self, line: str, where: str) -> None:
        if where != self.last:
            self.lines.append(f"{self.indent}# {comment(where) or '(no module or source line)'}")
            self.last = where
        self.lines.append(line)


def _group_place(group: FusionGroup, graph: Graph) -> str:
    """Where a group's ops came from: "in h.0.attn (model.py:12 in forward)", or the modules it spans."""
    computing = [n for n in group.nodes if graph[n].kind != "view"] or group.nodes
    sources = list(dict.fromkeys(graph[n].source for n in computing))
    source = sources[0] if len(sources) == 1 else ""
    if group.module or not group.modules:
        return where_text(f"in {group.module}" if group.module else "", source)
    spans = [m or "(top level)" for m in group.modules]
    return f"across {', '.join(spans[:4])}" + (f" and {len(spans) - 4} more" if len(spans) > 4 else "")


def _show(stage: Any) -> Any:
    try:
        from fusionlab.widgets import stage_widget
    except ImportError as error:  # the notebook extra is optional
        raise ImportError(f"{type(stage).__name__}.show() needs the notebook extra: pip install 'fusionlab[notebook]' "
                          f"({error})") from error
    return stage_widget(stage)


class _Stage:
    previous: Any
    seconds: float

    def as_text(self) -> str:  # pragma: no cover - every stage overrides it
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return _html(self)

    def show(self) -> Any:
        """The stage's widget (needs the notebook extra)."""
        return _show(self)


@dataclass(frozen=True, repr=False)
class Captured(_Stage):
    """The aten-level graph of the user's function, with shapes and dtypes; `capture(fn, *inputs)` makes one.

        >>> capture(torch.sigmoid, torch.randn(4))
        Captured(1 inputs, 1 aten ops, 1 outputs)
    """

    result: CaptureResult
    seconds: float = 0.0
    previous: None = None

    def decompose(self, rules: dict[Any, Rule] | None = None, layout: str = "auto",
                  saved_from: int | None = None,
                  output_strides: Sequence[tuple[int, ...] | None] | None = None) -> Decomposed:
        """Rewrite the aten graph into fusionlab's primitives through `rules`, an {aten op: rule} table (default:
        `decomposition_rules("extern")`, as `fl.explore` uses; `decomposition_rules("triton")` for Triton matmuls);
        `layout` chooses the convolutions' memory layout ("auto": channels-last on CUDA; decompose/layout.py).
        `saved_from`: the outputs from this position on are a training step's saved activations, which only its
        backward graph reads (the backend's forward graphs): the layout may store them channels-last.
        `output_strides`: eager's strides of each output, where the caller knows them (else read from the capture);
        what the caller gets is laid out so."""
        start = time.perf_counter()
        result = decompose_graph(self.result, decomposition_rules("extern") if rules is None else rules, layout,
                                 saved_from, output_strides)
        return Decomposed(result, self, time.perf_counter() - start)

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.result.graph_module

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        return self.result.inputs

    @property
    def aten_nodes(self) -> tuple[AtenNode, ...]:
        return self.result.aten_nodes

    @property
    def dynamic(self) -> bool:
        return bool(self.result.symbols)

    @property
    def outputs(self) -> tuple[str, ...]:
        output = next(n for n in self.graph_module.graph.nodes if n.op == "output")
        return tuple(a.name for a in torch.utils._pytree.tree_leaves(output.args[0]))

    def __repr__(self) -> str:
        return f"Captured({len(self.inputs)} inputs, {len(self.aten_nodes)} aten ops, {len(self.outputs)} outputs)"

    def as_text(self) -> str:
        names = {spec.placeholder: spec.name for spec in self.inputs}
        params = ", ".join(f'{names[s.placeholder]}: "{s.type.text()}"' for s in self.inputs)
        lines = [_header("captured by fusionlab.capture", self), f"def forward({params}):"]
        places = _Places(lines)
        for node in self.aten_nodes:
            args = _rename_words(node.args_text, names)
            kind = f': "{node.type.text()}"' if node.type else ""
            origin = f"  # from {node.decomposed_from}" if node.decomposed_from else ""
            places.add(f"    {node.name}{kind} = {node.target}({comment(args)}){origin}", node.module, node.source)
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines)


@dataclass(frozen=True, repr=False)
class Decomposed(_Stage):
    """fusionlab's primitive graph: pointwise, reduction, view, matmul and extern nodes.

        >>> capture(torch.sigmoid, torch.randn(4)).decompose()
        Decomposed(1 pointwise)
    """

    result: DecomposeResult
    previous: Captured
    seconds: float = 0.0

    @property
    def graph(self) -> Graph:
        return self.result.graph

    @property
    def fallbacks(self) -> tuple[tuple[str, str], ...]:
        """(aten node, why it runs as an extern op), one per aten op no rule could decompose."""
        return self.result.fallbacks

    @property
    def values(self) -> tuple[tuple[str, str], ...]:
        """(aten node, the IR value holding its result), in program order: how verify compares the two graphs."""
        return self.result.values

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.graph.nodes

    def fuse(self, policy: str | Policy = "default", forbid: Sequence[tuple[str, str]] = (),
             force: Sequence[tuple[str, str]] = ()) -> Fused:
        """Group the primitives into kernels under `policy`; `forbid`/`force` override single decisions (pairs of
        node names as printed here). An illegal forced fusion raises `FusionError`, saying why."""
        chosen = resolve_policy(policy)
        start = time.perf_counter()
        result = fuse_graph(self.graph, chosen, forbid, force)
        return Fused(result, self, time.perf_counter() - start)

    def run(self, *flat_inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The graph's outputs, computed node by node with plain torch ops (`fusionlab.decompose.reference`)."""
        return reference.run(self.graph, flat_inputs)

    def __repr__(self) -> str:
        kinds: dict[str, int] = {}
        for node in self.graph.nodes:
            kinds[node.kind] = kinds.get(node.kind, 0) + 1
        parts = ", ".join(f"{count} {kind}" for kind, count in kinds.items() if kind != "input")
        return f"Decomposed({parts})"

    def as_text(self) -> str:
        """The primitive program; each line ends with the captured aten node it came from."""
        graph = self.graph
        targets = {node.name: node.target for node in self.previous.aten_nodes}
        lines = [_header("decomposed by fusionlab.decompose", self)]
        for origin, reason in self.fallbacks:
            lines.append(f"# extern {origin}: {comment(reason)}")
        lines.append(f"def program({', '.join(graph.inputs)}):")
        places = _Places(lines)
        for node in graph.nodes:
            if node.kind == "input":
                continue
            notes = ["extern"] if node.kind == "extern" else []
            if node.origin:
                target = targets.get(node.origin)
                notes.append(f"from {node.origin}" + (f" ({target})" if target else ""))
            places.add(f"    {node.text()}" + (f"  # {comment(', '.join(notes))}" if notes else ""), node.module,
                       node.source)
        lines.append(f"    return ({', '.join(graph.outputs)}{',' if len(graph.outputs) == 1 else ''})")
        return "\n".join(lines)


@dataclass(frozen=True, repr=False)
class Fused(_Stage):
    """Fusion groups and the ordered decisions that built them (`result`, the fusion pass's own record).

        >>> capture(torch.sigmoid, torch.randn(4)).decompose().fuse("none")
        Fused(policy='none', 1 kernel, 0 extern, 0 decisions)
    """

    result: FuseResult
    previous: Decomposed
    seconds: float = 0.0

    @property
    def groups(self) -> tuple[FusionGroup, ...]:
        return self.result.groups

    @property
    def decisions(self) -> tuple[FusionDecision, ...]:
        return self.result.decisions

    @property
    def partitions(self) -> Sequence[tuple[tuple[str, ...], ...]]:
        """The partition of the nodes after each decision (index 0: before any)."""
        return self.result.partitions

    @property
    def policy_name(self) -> str:
        return self.result.policy

    def generate(self, looped_reductions: bool = False) -> Generated:
        """One Triton kernel per group and the Python wrapper that launches them (`looped_reductions=True` loops
        over every reduction, even where a row fits in registers)."""
        start = time.perf_counter()
        program = generate_program(self.previous.graph, self.result, self.previous.previous.result,
                                   looped_reductions)
        return Generated(program, self, time.perf_counter() - start)

    @property
    def kernels(self) -> tuple[FusionGroup, ...]:
        return tuple(g for g in self.groups if g.is_kernel)

    def groups_after(self, step: int) -> tuple[tuple[str, ...], ...]:
        """The partition of the nodes after decision `step` (-1: before any decision)."""
        return self.partitions[max(-1, min(step, len(self.decisions) - 1)) + 1]

    def replay(self) -> list[tuple[FusionDecision, tuple[tuple[str, ...], ...]]]:
        """Each decision with the partition it left behind, in order."""
        return [(d, self.partitions[i + 1]) for i, d in enumerate(self.decisions)]

    def __repr__(self) -> str:
        externs = sum(1 for g in self.groups if g.kind == "extern")
        count = len(self.kernels)
        return (f"Fused(policy={self.policy_name!r}, {count} kernel{'s' if count != 1 else ''}, {externs} extern, "
                f"{len(self.decisions)} decisions)")

    def as_text(self) -> str:
        graph = self.previous.graph
        lines = [_header(f"fused by fusionlab.fuse with policy {self.policy_name!r}", self)]
        lines.append(f"def program({', '.join(graph.inputs)}):")
        places = _Places(lines)
        for group in self.groups:
            outs = ", ".join(group.outputs)
            ins = ", ".join(group.inputs)
            place = _group_place(group, graph)
            if group.kind == "extern":
                places.add_at(f"    [{outs}] = {group.nodes[0]}({ins})  # extern: {graph[group.nodes[0]].op}", place)
                continue
            if group.kind == "view":
                places.add_at(f"    {outs} = view({ins})  # {graph[group.nodes[0]].op} between kernels", place)
                continue
            places.add_at(f"    [{outs}] = {group.name}({ins})  # reads {group.bytes_read} B, writes "
                          f"{group.bytes_written} B", place)
            for name in group.nodes:
                lines.append(f"        # {graph[name].text()}")
            for name in group.recomputed:  # fusion/recompute.py
                lines.append(f"        # {graph[name].text()}  (recomputed here: cheaper than storing it)")
        lines.append(f"    return ({', '.join(graph.outputs)},)")
        lines.append("# decisions:")
        for d in self.decisions:
            verdict = "fused" if d.fused else "kept apart"
            lines.append(f"#  {d.step:3d}. {d.producer} -> {d.consumer}: {verdict}, saves {d.bytes_saved} B: "
                         f"{comment(d.reason)}")
        return "\n".join(lines)


@dataclass(frozen=True, repr=False)
class Generated(_Stage):
    """One Triton kernel per group plus the Python wrapper that allocates, launches and calls externs.

        >>> capture(torch.sigmoid, torch.randn(4)).decompose().fuse().generate().kernels[0].name
        'pointwise_0_sigmoid'
    """

    program: Program
    previous: Fused
    seconds: float = 0.0

    def compile(self, autotune: bool = False) -> Compiled:
        """The runnable program (`autotune=True` times a few block sizes per kernel and shape at its first CUDA
        launch and keeps the fastest). Kernels compile at their first launch, not here."""
        start = time.perf_counter()
        runnable = Runnable(self.program, autotune)
        return Compiled(runnable, self, time.perf_counter() - start)

    @property
    def kernels(self) -> tuple[KernelSource, ...]:
        return self.program.kernels

    @property
    def wrapper(self) -> str:
        return self.program.wrapper

    def kernel_module(self, kernel: KernelSource) -> str:
        return KERNEL_PREAMBLE + "\n\n" + kernel.source

    def __repr__(self) -> str:
        return f"Generated({len(self.kernels)} Triton kernels, wrapper of {self.wrapper.count(chr(10))} lines)"

    def as_text(self) -> str:
        parts = [_header("generated by fusionlab.generate", self), KERNEL_PREAMBLE.rstrip()]
        parts += [k.source.rstrip() for k in self.kernels]
        parts.append(self.wrapper.rstrip())
        return "\n\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class CompiledKernelInfo:
    """One kernel after running: where it ran, its last launch config, what the autotuner measured, asm stages."""

    name: str
    backends: tuple[str, ...]
    config: dict[str, int]
    asm: dict[str, str]
    tuning: tuple[tuple[str, float], ...] = ()  # (config, median ms) per candidate, fastest first


def _tuning(handle: KernelHandle) -> tuple[tuple[str, float], ...]:
    rows = [(c.describe(), ms) for timings in handle.tuning.values() for c, ms in timings.items()]
    return tuple(sorted(rows, key=lambda row: row[1]))


@dataclass(frozen=True, repr=False)
class Compiled(_Stage):
    """The runnable program: `compiled(*graph_inputs)` launches the kernels (Triton JIT on CUDA, interpreter on CPU).

        >>> compiled = capture(torch.sigmoid, torch.randn(4)).decompose().fuse().generate().compile()

    It describes the program; `runnable` (runtime/runnable.py) holds its kernel handles and runs it.
    `compiled.record_launches(*graph_inputs)` lists the launches a call would make, without making them."""

    runnable: Runnable
    previous: Generated
    seconds: float = 0.0

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.runnable(*tensors)

    def record_launches(self, *tensors: torch.Tensor) -> list[LaunchRecord]:
        return self.runnable.record_launches(*tensors)

    @property
    def function(self) -> Any:
        """The wrapper program itself: calls it makes skip `prepare` (kernels compile at their first launch)."""
        return self.runnable.function

    @property
    def handles(self) -> tuple[KernelHandle, ...]:
        return self.runnable.handles

    @property
    def launches_per_call(self) -> int:
        return len(self.handles)

    @property
    def kernels(self) -> tuple[CompiledKernelInfo, ...]:
        return tuple(CompiledKernelInfo(h.name, tuple(sorted(h.backends_used)),
                                        dict(vars(h.last_config)) if h.last_config else {}, h.asm(), _tuning(h))
                     for h in self.handles)

    def __repr__(self) -> str:
        return f"Compiled({len(self.handles)} kernels, {self.launches_per_call} launches per call)"

    def as_text(self) -> str:
        lines = [_header("compiled by fusionlab.compile", self),
                 "# Triton JIT on CUDA, Triton's interpreter on CPU; chosen per launch"]
        for info in self.kernels:
            used = ", ".join(info.backends) or "not launched yet"
            lines.append(f"# {info.name}: {used}; last config {info.config or '-'}; asm stages "
                         f"{sorted(info.asm) or '-'}")
            for config, milliseconds in info.tuning[:4]:
                lines.append(f"#     autotune: {config} {milliseconds:.4f} ms")
        lines.append(self.previous.wrapper)
        return "\n".join(lines)


def capture(fn: Callable[..., Any], *inputs: Any, dynamic: bool = False,
            kwargs: dict[str, Any] | None = None) -> Captured:
    """The first verb: trace `fn(*inputs, **kwargs)` to aten ops (`dynamic=True`: sizes as symbols).

        >>> capture(lambda x: x.relu() * 2, torch.randn(8)).decompose().fuse().generate().compile()
        Compiled(1 kernels, 1 launches per call)
    """
    start = time.perf_counter()
    result = capture_graph(fn, inputs, kwargs or {}, dynamic)
    return Captured(result, time.perf_counter() - start)
