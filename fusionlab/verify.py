"""Checking fused results against eager PyTorch, and checking call-time inputs against the capture.

`verify_call` runs eager and the fused program on separate copies of fresh random inputs and compares every output
and every input or buffer the call writes. Where something differs it runs the three programs in between (the
captured aten graph, the decomposed primitive graph through `fusionlab.decompose.reference`, the generated kernels
with each kernel's outputs kept) and names the first stage and node where the values part.

    >>> report = verify_outputs([torch.ones(3)], [torch.ones(3)])
    >>> report.ok
    True
"""

from __future__ import annotations

import html
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from fusionlab.capture import CaptureResult
from fusionlab.codegen.kernel import KernelSource
from fusionlab.decompose.reference import interpret
from fusionlab.ir import Graph

# (atol, rtol) per dtype, for fused vs eager. Eager rounds every intermediate to a half-precision dtype and a fused
# kernel keeps float32, so where values cancel the two differ by an ulp or two of the intermediates (a bfloat16 ulp
# at 2..4 is 0.0156). Every other dtype must match exactly.
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 2e-2), torch.float32: (1e-4, 1e-4),
              torch.float64: (1e-7, 1e-7)}




@dataclass(frozen=True)
class OutputError:
    """One compared value: an output of the call, or an input or buffer after it (`label` names which)."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    max_abs_error: float
    max_rel_error: float
    ok: bool
    label: str = ""

    @property
    def title(self) -> str:
        return self.label or f"output {self.index}"


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

    def text(self) -> str:
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
class VerifyReport:
    """Max abs/rel error per output of fused vs eager, on fresh random inputs; also per input and buffer after the
    call, and where values first part when they do (`first_divergence`, `stages`).

        >>> fl.explore(torch.sigmoid, torch.randn(4)).verify().ok
        True
    """

    outputs: tuple[OutputError, ...]
    after_call: tuple[OutputError, ...] = ()
    stages: tuple[StageCheck, ...] = ()
    first_divergence: Divergence | None = None

    @property
    def rows(self) -> tuple[OutputError, ...]:
        return self.outputs + self.after_call

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.rows)

    def __repr__(self) -> str:
        worst = max((o.max_abs_error for o in self.rows), default=0.0)
        written = f", {len(self.after_call)} inputs/buffers" if self.after_call else ""
        return f"VerifyReport(ok={self.ok}, {len(self.outputs)} outputs{written}, max abs error {worst:.3g})"

    def lesson(self) -> str:
        """The stages in one line: "captured == eager; decomposed == captured; generated differs first at ..."."""
        if not self.stages:
            return "fused == eager" if self.ok else "fused differs from eager (stages not compared)"
        parts = [check.text() for check in self.stages]
        if self.first_divergence is not None and self.first_divergence.stage == "after the call":
            parts.append(self.first_divergence.text())
        return "; ".join(parts)

    def as_text(self) -> str:
        rows = [f"{o.title}: {str(o.dtype).removeprefix('torch.')}{list(o.shape)} max abs {o.max_abs_error:.3g}"
                f" max rel {o.max_rel_error:.3g} {'ok' if o.ok else 'MISMATCH'}" for o in self.rows]
        if self.stages:
            rows.append(f"stages: {self.lesson()}")
        if self.first_divergence is not None:
            rows.append(f"first divergence: {self.first_divergence.text()}")
        return "\n".join(rows)

    def _repr_html_(self) -> str:
        return report_html(self)


def _cell(text: Any, ok: bool | None = None) -> str:
    colour = "" if ok is None else (" style='color:#1a7f37'" if ok else " style='color:#cf222e;font-weight:bold'")
    return f"<td{colour}>{html.escape(str(text))}</td>"


def report_html(report: VerifyReport) -> str:
    """The report as static HTML: a line per stage, the first divergence, the compared values, the stages."""
    head = "".join(f"<th>{h}</th>" for h in ("value", "type", "max abs", "max rel", ""))
    rows = "".join(f"<tr>{_cell(o.title)}{_cell(str(o.dtype).removeprefix('torch.') + str(list(o.shape)))}"
                   f"{_cell(f'{o.max_abs_error:.3g}')}{_cell(f'{o.max_rel_error:.3g}')}"
                   f"{_cell('ok' if o.ok else 'MISMATCH', o.ok)}</tr>" for o in report.rows)
    parts = [f"<div class='fusionlab-verify'><p><code>{html.escape(repr(report))}</code></p>",
             f"<p>{html.escape(report.lesson())}</p>"]
    if report.first_divergence is not None:
        parts.append(f"<p><b>first divergence</b>: {html.escape(report.first_divergence.text())}</p>")
    parts.append(f"<table><tr>{head}</tr>{rows}</table>")
    if report.stages:
        head = "".join(f"<th>{h}</th>" for h in ("stage", "compared with", "values", "first difference", "kernel",
                                                  "max abs", ""))
        rows = "".join(f"<tr>{_cell(c.stage)}{_cell(c.against)}{_cell(c.compared)}"
                       f"{_cell(c.first + (f' ({c.value})' if c.value and c.value != c.first else ''))}"
                       f"{_cell(c.kernel)}{_cell(f'{c.max_abs_error:.3g}' if c.first else '')}"
                       f"{_cell(c.note or ('agrees' if c.ok else 'differs'), None if c.note else c.ok)}</tr>"
                       for c in report.stages)
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
    return "".join(parts) + "</div>"


def compare(want: torch.Tensor, got: torch.Tensor, index: int = 0, label: str = "") -> OutputError:
    """`got` against `want` within the tolerance of `want`'s dtype (NaN where `want` has NaN counts as equal)."""
    shape = tuple(want.shape)
    if want.shape != got.shape or want.dtype != got.dtype:
        return OutputError(index, shape, want.dtype, float("inf"), float("inf"), False, label)
    a, b = want.detach().double().cpu(), got.detach().double().cpu()
    if a.numel() == 0:
        return OutputError(index, shape, want.dtype, 0.0, 0.0, True, label)
    same_nan = torch.isnan(a) == torch.isnan(b)
    diff = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(a), (a - b).abs())
    diff = torch.where(a == b, torch.zeros_like(a), diff)  # equal infinities
    scale = torch.nan_to_num(a.abs(), nan=0.0)  # NaN where both are NaN: already counted as equal
    rel = diff / scale.clamp_min(1e-12)
    atol, rtol = TOLERANCES.get(want.dtype, (0.0, 0.0))
    ok = bool(same_nan.all()) and bool((diff <= atol + rtol * scale).all())
    return OutputError(index, shape, want.dtype, float(diff.max()), float(rel.max()), ok, label)


def verify_outputs(expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor]) -> VerifyReport:
    if len(expected) != len(actual):
        raise AssertionError(f"eager returned {len(expected)} outputs, fusionlab {len(actual)}")
    return VerifyReport(tuple(compare(want, got, index) for index, (want, got) in enumerate(zip(expected, actual))))


def random_like(tensor: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A fresh random tensor with the same shape, dtype, device and strides: floats never all zeros, integers
    within the example's range (indices stay valid; no zero where the example has none: divisors stay non-zero)."""
    # Expanded (stride-0) dimensions hold one value each: draw that one, then expand like the example.
    shape = tuple(1 if stride == 0 else size for size, stride in zip(tensor.shape, tensor.stride()))
    if tensor.dtype == torch.bool:
        fresh = torch.rand(shape, generator=generator) > 0.5
    elif tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        fresh = torch.randn(shape, generator=generator, dtype=torch.float32)
    else:
        fresh = _integers_like(tensor, shape, generator)
    out = torch.empty_strided(shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
    out.copy_(fresh.to(tensor.dtype))
    return out.expand(tensor.shape)


def _integers_like(tensor: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
    if tensor.numel() == 0:
        return torch.zeros(shape, dtype=torch.int64)
    low, high = int(tensor.min()), int(tensor.max())
    if low == high:
        return torch.full(shape, low, dtype=torch.int64)
    top = min(high + 1, torch.iinfo(torch.int64).max)
    fresh = torch.randint(low, top, shape, generator=generator, dtype=torch.int64)
    if low <= 0 <= high and not bool((tensor == 0).any()):
        fresh = torch.where(fresh == 0, torch.full_like(fresh, high), fresh)
    return fresh


def random_like_inputs(args: tuple[Any, ...], kwargs: dict[str, Any],
                       seed: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return pytree.tree_map(lambda v: random_like(v, generator) if isinstance(v, torch.Tensor) else v, (args, kwargs))


# -- running the stages value by value ---------------------------------------------------------------------------
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
        found.append(Divergence("captured", aten_outputs[first[0]], "", first[1]))
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
        found.append(Divergence("decomposed", node, "", error, value))
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
        found.append(Divergence("generated", name, kernel, error, name, origin))
    else:
        checks.append(StageCheck("generated", "decomposed", len(names), True))
    return tuple(checks), (found[0] if found else None)


# -- one verification: eager and fused on separate copies, state restored -----------------------------------------
def module_state(module: torch.nn.Module | None) -> dict[str, tuple[torch.Tensor, str]]:
    """A module's parameters and buffers by dotted name, with their kind ("parameter" or "buffer")."""
    if module is None:
        return {}
    found = {name: (param, "parameter") for name, param in module.named_parameters()}
    return found | {name: (buffer, "buffer") for name, buffer in module.named_buffers()}


def _snapshot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in state.items()}


def _restore(state: dict[str, torch.Tensor], saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, tensor in state.items():
            tensor.copy_(saved[name])


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def verify_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], captured: CaptureResult,
                fused: Callable[..., Any], flat_inputs: Callable[[tuple[Any, ...], dict[str, Any]], list[torch.Tensor]],
                programs: Callable[[], Programs], seed: int | None = None,
                localise_stages: bool | None = None) -> VerifyReport:
    """`fn` (eager) and `fused` on separate copies of fresh random inputs like `args`/`kwargs`; a module's
    parameters and buffers are put back before the fused call and left as eager leaves them. The stages are
    compared value by value where something differs (or when `localise_stages` is True)."""
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()))
    named = module_state(captured.module)
    state = {name: tensor for name, (tensor, _) in named.items()}
    before = _snapshot(state)
    eager_inputs = random_like_inputs(args, kwargs, seed)
    fused_inputs = random_like_inputs(args, kwargs, seed)
    with torch.no_grad():
        expected = _tensors(fn(*eager_inputs[0], **eager_inputs[1]))
    eager_after = _snapshot(state)
    try:
        _restore(state, before)
        actual = _tensors(fused(*fused_inputs[0], **fused_inputs[1]))
        fused_after = _snapshot(state)
        report = verify_outputs(expected, actual)
        names = [spec.name for spec in captured.inputs if spec.kind == "input"]
        rows = [compare(want, got, index, f"input {name!r} after the call") for index, (name, want, got)
                in enumerate(zip(names, _tensors(eager_inputs), _tensors(fused_inputs)))]
        for name, (_, kind) in named.items():
            changed = not torch.equal(before[name], eager_after[name]) or not torch.equal(before[name],
                                                                                         fused_after[name])
            if kind != "parameter" or changed:
                rows.append(compare(eager_after[name], fused_after[name], len(rows), f"{kind} {name!r} after the call"))
        report = VerifyReport(report.outputs, tuple(rows))
        if localise_stages or (localise_stages is None and not report.ok):
            _restore(state, before)
            flat = flat_inputs(*random_like_inputs(args, kwargs, seed))
            checks, divergence = localise(programs(), flat, expected)
            if divergence is None:
                written = next((row for row in report.after_call if not row.ok), None)
                if written is not None and all(check.ok for check in checks):
                    divergence = Divergence("after the call", written.label.removesuffix(" after the call"), "",
                                            written.max_abs_error)
            report = VerifyReport(report.outputs, report.after_call, checks, divergence)
    finally:
        _restore(state, eager_after)
    return report


