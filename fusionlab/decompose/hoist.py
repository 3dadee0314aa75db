"""Gathers and reshapes moved ahead of the pointwise ops that compute their operand, so the operand is never
written whole.

**Gathers.** Cross-entropy reads one log-probability per row: `log_softmax(x)[i, target[i]]`. Gathered from the
log-softmax, the whole [rows, vocabulary] table must be in memory first (an indirect load reads anywhere in it), so
a kernel writes 1 GB of log-probabilities at a 128k vocabulary to read back 4096 of them. The gather of a pointwise
value is the same pointwise op over its operands' gathered elements, and the gather of a broadcast row value is that
value at the row: `x[i, t] - amax[i] - log(sum[i])`. So the gather moves up through the pointwise ops (and
broadcasts) that compute its table until it reads values that are in memory anyway (an input, a reduction's
result), and the row kernel stores only its statistics, as Inductor's cross-entropy does. A gather moves only where
it selects fewer elements than the table holds: then recomputing its few elements costs less than writing the table.

**Reshapes** (`reshaped`, for split reductions: decompose/split.py). A kernel indexes one shape, so a reshape that
splits or merges dimensions runs as a view between kernels, and the value it reshapes is written whole first: the
float32 upcast of a bf16 column sum split into [parts, rows / parts, columns] wrote 400 MB to read 134 MB. The
reshape of a pointwise value is the op over its reshaped operands, so it moves up to the inputs and reductions,
which are in memory anyway and whose reshape is a free view.

    >>> b = Builder([], {"x": TensorType((4, 8), torch.float32), "t": TensorType((4, 1), torch.int64)})
    >>> rows = b.iota((4, 1), 0, torch.int64)
    >>> gathered = b.index(b.pointwise("exp", Ref("x")), [rows, Ref("t")], 0, (4, 1), False)
    >>> b.producer(gathered).op                      # exp(x[rows, t]), not exp(x)[rows, t]
    'exp'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sympy

from fusionlab.decompose.primitives import POINTWISE
from fusionlab.ir import Dim, Node, Ref, TensorType

if TYPE_CHECKING:
    from fusionlab.decompose.builder import Builder


def hoistable(node: Node) -> bool:
    """A pointwise op computed from its operands' elements at the same index alone."""
    return node.kind == "pointwise" and (node.op in POINTWISE or node.op == "cast")


def gathered(builder: Builder, table: Ref, indices: Sequence[Ref], dim: int, shape: tuple[Dim, ...],
         wrap: bool) -> Ref | None:
    """`table[..., indices, ...]` computed from gathers of what `table` is computed from, or None where the gather
    stays on `table` (the table is in memory anyway, or the gather reads as many elements as it holds). `indices` are
    already broadcast to `shape`, the gather's own."""
    key = ("gather", table, tuple(indices), dim, shape, wrap)  # a DAG reusing values is walked once per value
    if key not in builder._hoisted:
        builder._hoisted[key] = _gathered(builder, table, indices, dim, shape, wrap)
    return builder._hoisted[key]


def _gathered(builder: Builder, table: Ref, indices: Sequence[Ref], dim: int, shape: tuple[Dim, ...],
              wrap: bool) -> Ref | None:
    node = builder.producer(table)
    if node is None or not _selects_fewer(node.type.shape, dim, len(indices), shape):
        return None
    if hoistable(node):
        operands = [a for a in node.args if isinstance(a, Ref)]
        if any(tuple(builder.type_of(a).shape) != tuple(node.type.shape) for a in operands):
            return None  # operands are broadcast to the op's shape by the Builder; anything else is not followed
        args = tuple(builder.index(a, indices, dim, shape, wrap) if isinstance(a, Ref) else a for a in node.args)
        return builder._add("pointwise", node.op, args, TensorType(shape, node.type.dtype), dict(node.params))
    if node.kind == "view" and node.op == "expand":
        return _through_expand(builder, node, indices, dim, shape, wrap)
    if node.kind == "view" and node.op == "reshape":
        return _through_reshape(builder, node, indices, dim, shape, wrap)
    return None


def _through_reshape(builder: Builder, node: Node, indices: Sequence[Ref], dim: int, shape: tuple[Dim, ...],
                     wrap: bool) -> Ref | None:
    """A gather of a reshaped pointwise value (`float(logits).view(-1, vocab)[i, t]`) gathers from the op over
    reshaped operands (`reshaped`), which moves on up: the reshape of an input is a free view."""
    source = builder.producer(Ref(node.inputs[0]))
    if source is None or not hoistable(source) or not all(isinstance(d, int) for d in node.type.shape):
        return None
    moved = reshaped(builder, Ref(node.inputs[0]), tuple(int(d) for d in node.type.shape))
    producer = builder.producer(moved)
    if producer is None or not hoistable(producer):
        return None
    return gathered(builder, moved, indices, dim, shape, wrap)


def _through_expand(builder: Builder, node: Node, indices: Sequence[Ref], dim: int, shape: tuple[Dim, ...],
                    wrap: bool) -> Ref | None:
    """A gather of a broadcast value reads the value itself: along a broadcast dim every index reads its one
    element. An index out of range still reads out of range (and so is reported as the gather reports it)."""
    source = Ref(node.inputs[0])
    before, after = builder.type_of(source).shape, node.type.shape
    if len(before) != len(after):
        return None
    indexed = range(dim, dim + len(indices))
    if any(before[d] != after[d] for d in range(len(after)) if d not in indexed):
        return None  # a broadcast along a dim the gather does not index: the gathered shape would change
    moved: list[Ref] = []
    for d, index in zip(indexed, indices):
        if before[d] == 1 and after[d] != 1:
            if not isinstance(after[d], int):
                return None
            moved.append(_first_if_in_range(builder, index, after[d], wrap))
        else:
            moved.append(index)
    return builder.index(source, moved, dim, shape, wrap)


def _first_if_in_range(builder: Builder, index: Ref, size: int, wrap: bool) -> Ref:
    """0 where `index` lies in [0, size) ([-size, size) with `wrap`), else `index` itself."""
    valid = builder.pointwise("logical_and", builder.pointwise("ge", index, -size if wrap else 0),
                              builder.pointwise("lt", index, size))
    return builder.pointwise("where", valid, builder.full(0, index), index)


def reshaped(builder: Builder, value: Ref, shape: tuple[int, ...]) -> Ref:
    """`value` reshaped to `shape` (static sizes), the reshape moved ahead of the pointwise ops and broadcasts that
    compute `value` wherever it can go."""
    key = ("reshape", value, shape)
    if key not in builder._hoisted:
        builder._hoisted[key] = _reshaped(builder, value, shape)
    return builder._hoisted[key]  # type: ignore[return-value]


def _reshaped(builder: Builder, value: Ref, shape: tuple[int, ...]) -> Ref:
    node = builder.producer(value)
    before = builder.type_of(value).shape
    groups = dim_groups(before, shape) if all(isinstance(d, int) for d in before) else None
    if node is None or groups is None:
        return builder.reshape(value, shape)
    if hoistable(node) and all(tuple(builder.type_of(a).shape) == tuple(before)
                                for a in node.args if isinstance(a, Ref)):
        args = tuple(reshaped(builder, a, shape) if isinstance(a, Ref) else a for a in node.args)
        return builder._add("pointwise", node.op, args, TensorType(shape, node.type.dtype), dict(node.params))
    if node.kind == "view" and node.op == "expand":
        source = Ref(node.inputs[0])
        small = broadcast_groups(builder.type_of(source).shape, before, shape, groups)
        if small is not None:
            return builder.broadcast(reshaped(builder, source, small), shape)
    return builder.reshape(value, shape)


def dim_groups(before: tuple[Dim, ...], after: tuple[int, ...]) -> list[tuple[range, range]] | None:
    """The reshape as groups of dims with equal products: ([65536, 1024] -> [8, 8192, 1024]: dims (0,) become
    (0, 1), (1,) becomes (2,))."""
    groups: list[tuple[range, range]] = []
    i = j = 0
    while i < len(before) or j < len(after):
        first_i, first_j, left, right = i, j, 1, 1
        if i < len(before):
            left, i = left * int(before[i]), i + 1
        if j < len(after):
            right, j = right * after[j], j + 1
        while left != right:
            if left < right and i < len(before):
                left, i = left * int(before[i]), i + 1
            elif right < left and j < len(after):
                right, j = right * after[j], j + 1
            else:
                return None
        groups.append((range(first_i, i), range(first_j, j)))
    return groups


def broadcast_groups(source: tuple[Dim, ...], before: tuple[Dim, ...], after: tuple[int, ...],
                      groups: list[tuple[range, range]]) -> tuple[int, ...] | None:
    """The shape the broadcast `source` (of `before`'s rank) takes so that broadcasting it to `after` gives the
    reshape of its broadcast to `before`: a group of dims all broadcast becomes 1s, a group kept whole keeps its
    sizes; None for a group both broadcast and not, or a broadcast that adds dims."""
    if len(source) != len(before):
        return None
    small: list[int] = []
    for old, new in groups:
        if all(source[d] == 1 for d in old):
            small.extend(1 for _ in new)
        elif all(source[d] == before[d] for d in old):
            small.extend(after[d] for d in new)
        else:
            return None
    return tuple(small)


def _selects_fewer(table: tuple[Dim, ...], dim: int, count: int, shape: tuple[Dim, ...]) -> bool:
    """Whether the gather reads fewer elements than the table's indexed dims hold."""
    positions = shape[dim:dim + len(shape) - (len(table) - count)]
    ratio = sympy.simplify(sympy.Mul(*positions) / sympy.Mul(*table[dim:dim + count]))
    return bool(ratio.is_number and ratio < 1)


__all__ = ["broadcast_groups", "dim_groups", "gathered", "hoistable", "reshaped"]
