"""Where fused and eager values part: the programs between them run value by value, each stage against the one
before it (the captured aten graph against eager, the decomposed primitive graph through the reference
interpreter against the captured graph, the generated kernels with each kernel's outputs kept against the
decomposed graph), naming the first stage, node and kernel where the values differ.

    >>> checks, divergence = localise(programs, flat_inputs, eager_outputs)
    >>> [check.text() for check in checks]   # one line per stage; divergence: the first place they part
    ['captured == eager', 'decomposed differs from captured first at cos (max abs 1.3)', ...]
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from fusionlab.capture import CaptureResult
from fusionlab.codegen.kernel import KernelSource
from fusionlab.compare import compare
from fusionlab.decompose.reference import interpret
from fusionlab.ir import Graph, where_text


@dataclass(frozen=True)
class StageCheck:
    """One stage compared value by value with the stage before it: `first` is the first value that differs."""

    stage: str  # "captured" | "decomposed" | "generated"
    against: str  # "eager" | "captured" | "decomposed"
    compared: int  # values compared
    ok: bool
    first: str = ""  # the node where the values part ("" when they agree)
    value: str = ""  # the IR value holding it (decomposed and generated stages)
    kernel: str = ""  # the kernel that wrote it (generated stage; "" where the wrapper made it)
    max_abs_error: float = 0.0  # at `first`
    note: str = ""  # why the stage could not be run, where it could not

    def text(self) -> str:
        if self.note:
            return f"{self.stage}: not compared ({self.note})"
        if self.ok:
            return f"{self.stage} == {self.against}"
        where = f"kernel {self.kernel}, " if self.kernel else ""
        return (f"{self.stage} differs from {self.against} first at {self.first} ({where}max abs "
                f"{self.max_abs_error:.3g})")


@dataclass(frozen=True)
class Divergence:
    """Where the values first part: the stage, the node (an aten node; an IR value for generated), kernel, error."""

    stage: str  # "captured" | "decomposed" | "generated" | "after the call"
    node: str
    kernel: str
    error: float
    value: str = ""
    origin: str = ""  # the aten node an IR value came from
    where: str = ""  # its module and source line ("h.0.attn (model.py:12 in forward)")

    def text(self) -> str:
        return self._text() + (f"; the node comes from {self.where}" if self.where else "")

    def _text(self) -> str:
        if self.stage == "captured":
            return (f"{self.node}: captured differs from eager (max abs {self.error:.3g}): the traced graph no longer "
                    "computes what the function does (a Python value or global baked in at capture?)")
        if self.stage == "decomposed":
            return (f"{self.node}: captured matches, decomposed differs (IR value {self.value}, max abs "
                    f"{self.error:.3g}): the decomposition rule for this aten op computes something else")
        if self.stage == "generated":
            source = f" (from {self.origin})" if self.origin and self.origin != self.node else ""
            where = f"kernel {self.kernel}" if self.kernel else "the wrapper, between kernels"
            return f"{self.node}{source}: decomposed matches, generated differs ({where}, max abs {self.error:.3g})"
        return (f"{self.node}: every stage agrees on the outputs, but the value after the call differs (max abs "
                f"{self.error:.3g}): the fused program does not write it as eager does")


@dataclass(frozen=True)
class Programs:
    """The programs between eager and fused: the captured aten graph, the decomposed graph with decompose's
    (aten node, IR value) map, the generated kernels and the compiled wrapper function."""

    captured: CaptureResult
    graph: Graph
    values: tuple[tuple[str, str], ...]
    kernels: tuple[KernelSource, ...]
    function: Callable[..., Any]


class _Recorder(torch.fx.Interpreter):
    """Runs the captured graph, keeping every node's value."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        # A copy: an in-place op later in the graph must not change the value kept for this node.
        self.values[n.name] = result.clone() if isinstance(result, torch.Tensor) else result
        return result


def captured_values(graph_module: torch.fx.GraphModule,
                    flat: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """The captured graph's flat outputs and every node's value, by aten node name."""
    recorder = _Recorder(graph_module)
    with torch.no_grad():
        outputs = recorder.run(*flat)
    return [o for o in pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)], recorder.values


def generated_values(function: Callable[..., Any], kernels: Sequence[KernelSource], flat: Sequence[torch.Tensor]
                     ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor], dict[str, str]]:
    """The wrapper run with a launch that runs each kernel, then copies the buffers it wrote: the outputs, each
    kernel-written IR value, and the kernel that wrote it."""
    by_name = {kernel.name: kernel for kernel in kernels}
    values: dict[str, torch.Tensor] = {}
    writers: dict[str, str] = {}

    def launch(handle: Any, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        handle.launch(*args, xnumel=xnumel, rnumel=rnumel)
        kernel = by_name[handle.name]
        passed = [argument for argument in kernel.arguments if argument.role != "numel"]  # numels go by keyword
        for argument, value in zip(passed, args):
            if argument.role == "output":
                values[argument.value] = value.clone()
                writers[argument.value] = kernel.name

    recording = types.FunctionType(function.__code__, {**function.__globals__, "launch": launch})
    with torch.no_grad():
        outputs = tuple(recording(*flat))
    return outputs, values, writers


def _first(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[int, float] | None:
    """The index of the first pair whose values differ, and its max abs error."""
    for index, (want, got) in enumerate(pairs):
        row = compare(want, got)
        if not row.ok:
            return index, row.max_abs_error
    return None


def _copies(flat: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each program gets its own inputs: one that writes an input must not change what the next one reads."""
    return [tensor.clone() for tensor in flat]


def localise(programs: Programs, flat: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]
             ) -> tuple[tuple[StageCheck, ...], Divergence | None]:
    """Each stage against the one before it, node by node in program order; the first place the values part."""
    checks: list[StageCheck] = []
    found: list[Divergence] = []
    captured = programs.captured.graph_module
    places = {node.name: where_text(node.module, node.source) for node in programs.captured.aten_nodes}
    output_node = next(n for n in captured.graph.nodes if n.op == "output")
    aten_outputs = [n.name for n in pytree.tree_leaves(output_node.args[0]) if isinstance(n, torch.fx.Node)]
    try:
        aten_results, aten = captured_values(captured, _copies(flat))
    except Exception as failure:  # noqa: BLE001 - reported in the stage table
        return (StageCheck("captured", "eager", 0, False, note=f"{type(failure).__name__}: {failure}"),), None
    count = min(len(expected), len(aten_results))
    first = _first(list(zip(expected, aten_results)))
    if first:
        checks.append(StageCheck("captured", "eager", count, False, aten_outputs[first[0]], max_abs_error=first[1]))
        found.append(Divergence("captured", aten_outputs[first[0]], "", first[1],
                                where=places.get(aten_outputs[first[0]], "")))
    else:
        checks.append(StageCheck("captured", "eager", count, len(aten_results) >= len(expected)))
    graph = programs.graph
    try:
        reference = interpret(graph, _copies(flat))
    except Exception as failure:  # noqa: BLE001 - reported in the stage table
        checks.append(StageCheck("decomposed", "captured", 0, False, note=f"{type(failure).__name__}: {failure}"))
        return tuple(checks), (found[0] if found else None)
    kinds = {n.name: n.op for n in captured.graph.nodes}
    mapped = [(aten_name, value) for aten_name, value in programs.values
              if kinds.get(aten_name) != "placeholder" and value in reference
              and isinstance(aten.get(aten_name), torch.Tensor)]
    mapped += list(zip(aten_outputs, graph.outputs))
    first = _first([(aten[a], reference[v]) for a, v in mapped])
    if first:
        (node, value), error = mapped[first[0]], first[1]
        checks.append(StageCheck("decomposed", "captured", len(mapped), False, node, value, "", error))
        found.append(Divergence("decomposed", node, "", error, value, where=places.get(node, "")))
    else:
        checks.append(StageCheck("decomposed", "captured", len(mapped), True))
    try:
        outputs, written, writers = generated_values(programs.function, programs.kernels, _copies(flat))
    except Exception as failure:  # noqa: BLE001 - reported in the stage table
        checks.append(StageCheck("generated", "decomposed", 0, False, note=f"{type(failure).__name__}: {failure}"))
        return tuple(checks), (found[0] if found else None)
    names = [n.name for n in graph.nodes if n.name in written] + list(graph.outputs)
    results = [written[n.name] for n in graph.nodes if n.name in written] + list(outputs)
    first = _first([(reference[name], got) for name, got in zip(names, results)])
    if first:
        name, error = names[first[0]], first[1]
        kernel = writers.get(name, "")
        origin = graph[name].origin if name in graph else ""
        checks.append(StageCheck("generated", "decomposed", len(names), False, name, name, kernel, error))
        found.append(Divergence("generated", name, kernel, error, name, origin, graph[name].where if name in graph
                                else ""))
    else:
        checks.append(StageCheck("generated", "decomposed", len(names), True))
    return tuple(checks), (found[0] if found else None)
