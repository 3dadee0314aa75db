"""Hypothesis-generated op graphs: random DAGs of unary, binary and reduction ops over a few broadcast inputs,
explored under a random policy and compared to eager.

A graph is a list of steps; each step applies one op to earlier values (inputs or results), so values are reused
(diamonds, multi-use intermediates) and shapes broadcast. Reductions keep their dimension most of the time so
that later steps can broadcast them back (the softmax/layer-norm pattern). The function returns the last value
and, sometimes, an intermediate too (a multi-output kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusionlab as fl

# Bounded or well-conditioned ops only: the comparison is of fusionlab against eager, not of float32 rounding.
UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg, "abs": torch.abs, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
    "exp_tanh": lambda x: torch.exp(torch.tanh(x)), "scale": lambda x: x * 0.5 + 0.25,
    "softplus": F.softplus, "sqrt_abs": lambda x: torch.sqrt(x.abs() + 0.1),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum,
    "where_gt": lambda a, b: torch.where(a > b, a, b * 0.5), "div_safe": lambda a, b: a / (b.abs() + 1.0),
}
REDUCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin,
    "var": lambda x, axis, keepdim: torch.var(x, axis, keepdim=keepdim, correction=0),
    "logsumexp": torch.logsumexp,
}
# Views that move elements: each ends a kernel, so values cross kernel boundaries with strides.
VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transpose": lambda x: x.transpose(0, -1), "flip_slice": lambda x: x[..., 1:],
    "unsqueeze_squeeze": lambda x: x.unsqueeze(0).squeeze(0) * 1.5,
}


@dataclass(frozen=True)
class Step:
    kind: str  # "unary" | "binary" | "reduction" | "softmax" | "view"
    op: str
    operands: tuple[int, ...]  # indices into the values computed so far (inputs first)
    axis: int | tuple[int, int] = -1
    keepdim: bool = True


@dataclass(frozen=True)
class RandomGraph:
    rows: int
    columns: int
    input_shapes: tuple[tuple[int, ...], ...]
    transposed: tuple[bool, ...]
    steps: tuple[Step, ...]
    extra_output: int | None
    policy: str
    looped: bool = False

    def run(self, *inputs: torch.Tensor) -> Any:
        values = list(inputs)
        for step in self.steps:
            operands = [values[i] for i in step.operands]
            if step.kind == "unary":
                values.append(UNARY[step.op](operands[0]))
            elif step.kind == "binary":
                values.append(BINARY[step.op](operands[0], operands[1]))
            elif step.kind == "softmax":
                values.append(torch.softmax(operands[0], step.axis))
            elif step.kind == "view":
                values.append(VIEWS[step.op](operands[0]))
            else:
                values.append(REDUCTIONS[step.op](operands[0], step.axis, keepdim=step.keepdim))
        last = values[-1]
        if self.extra_output is not None and self.extra_output != len(values) - 1:
            return last, values[self.extra_output]
        return last

    def make_inputs(self) -> tuple[torch.Tensor, ...]:
        made = []
        for shape, transposed in zip(self.input_shapes, self.transposed):
            if transposed and len(shape) == 2:
                made.append(torch.randn(shape[1], shape[0]).t())
            else:
                made.append(torch.randn(shape))
        return tuple(made)


@st.composite
def random_graphs(draw: st.DrawFn) -> RandomGraph:
    rows = draw(st.integers(2, 6))
    columns = draw(st.integers(3, 17))
    base: tuple[int, ...] = (rows, columns) if draw(st.integers(0, 3)) else (2, rows, columns)
    shape_choices = [base, base, (columns,), (rows, 1), (1, columns), ()]
    count = draw(st.integers(1, 3))
    shapes = [base] + [draw(st.sampled_from(shape_choices)) for _ in range(count - 1)]
    transposed = tuple(draw(st.booleans()) and len(s) == 2 and 1 not in s for s in shapes)
    # Track each value's shape so reductions pick a valid axis and binary ops broadcast.
    values: list[tuple[int, ...]] = [tuple(s) for s in shapes]
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduction", "softmax", "view"]))
        first = draw(st.integers(0, len(values) - 1))
        rank = len(values[first])
        if kind in ("reduction", "softmax", "view") and (rank == 0 or values[first][-1] < 2):
            kind = "unary"
        if kind == "binary":
            partners = [i for i, shape in enumerate(values) if _broadcasts(values[first], shape)]
            second = draw(st.sampled_from(partners))
            steps.append(Step(kind, draw(st.sampled_from(sorted(BINARY))), (first, second)))
            values.append(tuple(torch.broadcast_shapes(values[first], values[second])))
        elif kind == "unary":
            steps.append(Step(kind, draw(st.sampled_from(sorted(UNARY))), (first,)))
            values.append(values[first])
        elif kind == "softmax":
            steps.append(Step(kind, "softmax", (first,), axis=draw(st.integers(-rank, rank - 1))))
            values.append(values[first])
        elif kind == "view":
            op = draw(st.sampled_from(sorted(VIEWS)))
            steps.append(Step(kind, op, (first,)))
            values.append(tuple(VIEWS[op](torch.empty(values[first])).shape))
        else:
            axis: int | tuple[int, int] = draw(st.integers(-rank, rank - 1))
            if rank >= 2 and draw(st.integers(0, 4)) == 0:
                axis = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=2, max_size=2))))  # type: ignore
            keepdim = draw(st.sampled_from([True, True, True, False]))
            op = draw(st.sampled_from(sorted(REDUCTIONS)))
            steps.append(Step(kind, op, (first,), axis, keepdim))
            values.append(tuple(REDUCTIONS[op](torch.empty(values[first]), axis, keepdim=keepdim).shape))
    extra = draw(st.one_of(st.none(), st.integers(len(shapes), len(values) - 1)))
    policy = draw(st.sampled_from(["none", "pointwise", "default"]))
    return RandomGraph(rows, columns, tuple(shapes), transposed, tuple(steps), extra, policy, draw(st.booleans()))


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        torch.broadcast_shapes(a, b)
    except RuntimeError:
        return False
    return True


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_graphs())
def test_random_graph_matches_eager(graph: RandomGraph) -> None:
    ex = fl.explore(graph.run, *graph.make_inputs(), policy=graph.policy, looped_reductions=graph.looped)
    fresh = graph.make_inputs()
    expected = graph.run(*fresh)
    actual = ex(*fresh)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4, equal_nan=True,
                               msg=lambda m: f"{m}\n{graph}\n{ex.fused.as_text()}")
