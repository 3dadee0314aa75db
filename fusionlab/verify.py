"""Checking fused results against eager PyTorch.

`verify_call` runs eager and the fused program on separate copies of fresh random inputs and compares every output
and every input or buffer the call writes. Where something differs, `fusionlab.localise` runs the three programs in
between (the captured aten graph, the decomposed primitive graph, the generated kernels) and names the first stage
and node where the values part.

    >>> report = verify_outputs([torch.ones(3)], [torch.ones(3)])
    >>> report.ok
    True
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from fusionlab.capture import CaptureResult
from fusionlab.compare import OutputError, compare, computed_through, loosest_float_in
from fusionlab.ir import where_text
from fusionlab.localise import Divergence, Programs, StageCheck, localise


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
    note: str = ""  # what else a reader must know (the program draws random numbers)

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
            lesson = "fused == eager" if self.ok else "fused differs from eager (stages not compared)"
            return f"{lesson}; {self.note}" if self.note else lesson
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
        if self.note and not self.stages:
            rows.append(f"note: {self.note}")
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
    if report.note and report.stages:
        parts.append(f"<p><b>note</b>: {html.escape(report.note)}</p>")
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


def verify_outputs(expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor],
                   through: Sequence[torch.dtype | None] = ()) -> VerifyReport:
    """Each output against eager's; `through`: per output, the loosest floating dtype it is computed from
    (`compare.computed_through`), whose tolerance it gets where looser."""
    if len(expected) != len(actual):
        raise AssertionError(f"eager returned {len(expected)} outputs, fusionlab {len(actual)}")
    loosest = list(through) if len(through) == len(expected) else [None] * len(expected)
    return VerifyReport(tuple(compare(want, got, index, through=dtype)
                              for index, (want, got, dtype) in enumerate(zip(expected, actual, loosest))))


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


# -- random ops: eager and fused draw from the same generator state ----------------------------------------------
def random_ops(captured: CaptureResult) -> tuple[str, ...]:
    """The aten ops in the captured program that draw random numbers (dropout's bernoulli, randn, ...), each once.

        >>> random_ops(capture(lambda x: F.dropout(x, 0.5), (torch.randn(4),), {}))
        ('aten.bernoulli.p',)
    """
    found: dict[str, None] = {}
    for node in captured.graph_module.graph.nodes:
        if node.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            found[f"aten.{node.target.__name__}" if getattr(node.target, "namespace", "") == "aten"
                  else str(node.target)] = None
    return tuple(found)


def _generator_states() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_generator_states(states: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    torch.set_rng_state(states[0])
    if states[1]:
        torch.cuda.set_rng_state_all(states[1])


def random_places(captured: CaptureResult) -> tuple[str, ...]:
    """Where the program draws random numbers, each place once: "Dropout at transformer.drop" for a module's op,
    else the op and the user's line ("aten.rand_like at model.py:12 in forward")."""
    random = set(random_ops(captured))
    found: dict[str, None] = {}
    for node in captured.aten_nodes:
        if node.target not in random:
            continue
        module = _submodule(captured.module, node.module) if node.module else None
        place = (f"{type(module).__name__} at {node.module}" if module is not None
                 else f"{node.target} at {where_text(node.module, node.source) or 'the top level'}")
        found[place] = None
    return tuple(found)


def _submodule(root: torch.nn.Module | None, path: str) -> torch.nn.Module | None:
    try:
        return root.get_submodule(path) if root is not None else None
    except AttributeError:  # a path under a closure's module (`block.attn`), not under the captured module
        return None


def _random_note(captured: CaptureResult, ok: bool) -> str:
    places = random_places(captured)
    shown = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
    training = captured.module is not None and captured.module.training
    who = "the model is in train mode and draws" if training else "the program draws"
    if ok:
        return (f"{who} random numbers ({shown}): eager and fusionlab ran from the same generator state, and "
                "fusionlab runs random ops in eager PyTorch in program order, so both drew the same numbers")
    return (f"{who} random numbers ({shown}): eager and fusionlab ran from the same generator state and still "
            "differ, so either they drew different numbers (the function draws or seeds outside what was captured: "
            "a torch.manual_seed or a draw in Python code runs once, at capture) or the difference lies elsewhere; "
            "the stages were not compared value by value, since each would draw numbers of its own. Compare without "
            "randomness: call model.eval(), or pass dropout=0 (build the model with dropout=0.0, training=False to "
            "F.dropout), or compare under one seed (torch.manual_seed before each call)")


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
    draws = random_ops(captured)
    generators = _generator_states()  # eager and fused draw from the same state (dropout keeps its mask)
    with torch.no_grad():
        expected = _tensors(fn(*eager_inputs[0], **eager_inputs[1]))
    eager_after = _snapshot(state)
    try:
        _restore(state, before)
        if draws:
            _set_generator_states(generators)
        actual = _tensors(fused(*fused_inputs[0], **fused_inputs[1]))
        fused_after = _snapshot(state)
        through = computed_through(captured.graph_module)
        report = verify_outputs(expected, actual, through)
        anywhere = loosest_float_in(captured.graph_module)  # what an input written in place may be computed from
        names = [spec.name for spec in captured.inputs if spec.kind == "input"]
        rows = [compare(want, got, index, f"input {name!r} after the call", anywhere) for index, (name, want, got)
                in enumerate(zip(names, _tensors(eager_inputs), _tensors(fused_inputs)))]
        for name, (_, kind) in named.items():
            changed = not torch.equal(before[name], eager_after[name]) or not torch.equal(before[name],
                                                                                         fused_after[name])
            if kind != "parameter" or changed:
                rows.append(compare(eager_after[name], fused_after[name], len(rows), f"{kind} {name!r} after the call",
                                    anywhere))
        report = VerifyReport(report.outputs, tuple(rows), note=_random_note(captured, report.ok) if draws else "")
        if draws and not localise_stages:
            return report  # each stage would draw numbers of its own: comparing them would only show that
        if localise_stages or (localise_stages is None and not report.ok):
            _restore(state, before)
            flat = flat_inputs(*random_like_inputs(args, kwargs, seed))
            checks, divergence = localise(programs(), flat, expected)
            if divergence is None:
                written = next((row for row in report.after_call if not row.ok), None)
                if written is not None and all(check.ok for check in checks):
                    divergence = Divergence("after the call", written.label.removesuffix(" after the call"), "",
                                            written.max_abs_error)
            report = VerifyReport(report.outputs, report.after_call, checks, divergence, report.note)
    finally:
        _restore(state, eager_after)
    return report


