"""Indexing rules: reads at positions held in a tensor (`embedding`, `x[idx]`, `gather`, `index_select`) become the
`index` primitive, an indirect load inside the consumer's kernel; a one-hot `scatter` becomes `where(iota == index,
src, self)`; `slice_scatter` and `select_scatter` (a slice's or a select's gradient, a write through a view) are a
`where` over the positions they replace; `constant_pad_nd` and `roll` re-index their operand (a masked read, a read
at (i - shift) mod n).

The index tensors are read like pointwise operands; the indexed table is read whole from memory (fusion keeps it
out of the kernel that indexes it, `fusion/domain.table_blocker`). What happens to an index out of range is said
once, in `codegen/kernel.KernelWriter._gather`.

    >>> aten.embedding in INDEXING_RULES
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Dim, Ref

aten = torch.ops.aten


def _placed(b: Builder, index: Ref, before: int, span: int, after: int) -> Ref:
    """`index` reshaped to sit on output dims before..before+span (size-1 dims around it)."""
    shape = tuple(b.type_of(index).shape)
    return b.reshape(index, (1,) * before + (1,) * (span - len(shape)) + shape + (1,) * after)


def _index_tensors(b: Builder, table: Ref, indices: Sequence[Ref], dim: int, wrap: bool) -> Ref:
    """table[..., indices..., ...] with the index tensors on adjacent dims from `dim`: aten's output shape."""
    shape: tuple[Dim, ...] = tuple(b.expected.shape)
    rest = b.type_of(table).rank - dim - len(indices)
    span = len(shape) - dim - rest
    placed = [_placed(b, index, dim, span, rest) for index in indices]
    return b.index(table, placed, dim, shape, wrap)


def _embedding(b: Builder, weight: Ref, indices: Ref, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> Ref:
    """weight[indices] (padding_idx only changes the gradient). A negative index is out of range, as in eager."""
    if b.type_of(weight).rank != 2:
        raise RuleNotApplicable("an embedding table that is not 2-D")
    return _index_tensors(b, weight, [indices], 0, wrap=False)


def _index(b: Builder, x: Ref, indices: Sequence[Ref | None]) -> Ref:
    """x[i, j] with index tensors (and None for whole dims): the common forms, where the index tensors sit on
    adjacent dims. Separated index tensors (x[i, :, j]) move their dims to the front in PyTorch: extern."""
    positions = [p for p, index in enumerate(indices) if index is not None]
    if not positions:
        raise RuleNotApplicable("no index tensor")
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise RuleNotApplicable("index tensors on dims that are not adjacent (PyTorch moves their dims first)")
    tensors = [indices[p] for p in positions]
    if not all(isinstance(t, Ref) for t in tensors):
        raise RuleNotApplicable("an index that is not a tensor")
    return _index_tensors(b, x, tensors, positions[0], wrap=True)  # type: ignore[arg-type]


def _index_select(b: Builder, x: Ref, dim: int, index: Ref) -> Ref:
    rank = b.type_of(x).rank
    if rank == 0 or b.type_of(index).rank != 1:
        raise RuleNotApplicable("index_select of a 0-d tensor or with a 0-d index")
    return _index_tensors(b, x, [index], dim % rank, wrap=False)


def _gather(b: Builder, x: Ref, dim: int, index: Ref, sparse_grad: bool = False) -> Ref:
    """x.gather(dim, index): every dim indexed, by the element's own position (iota) except along `dim`."""
    shape = tuple(b.type_of(index).shape)
    rank = len(shape)
    if rank == 0 or b.type_of(x).rank != rank:
        raise RuleNotApplicable("gather of 0-d tensors")
    dim = dim % rank
    indices = [index if d == dim else b.iota(shape, d, torch.int64) for d in range(rank)]
    return b.index(x, indices, 0, shape, wrap=False)


def _scatter(b: Builder, x: Ref, dim: int, index: Ref, src: Any, reduce: str | None = None) -> Ref:
    """The one-hot scatter (index of size 1 along `dim`, the other dims x's own): the element at index[p] along
    `dim` takes src, every other keeps x, i.e. where(iota == index, src, x). nll_loss's backward is one."""
    if reduce is not None:
        raise RuleNotApplicable(f"scatter with reduce={reduce!r}")
    shape = tuple(b.type_of(x).shape)
    index_shape = tuple(b.type_of(index).shape)
    rank = len(shape)
    if rank == 0:
        raise RuleNotApplicable("scatter into a 0-d tensor")
    dim = dim % rank
    if len(index_shape) != rank or index_shape[dim] != 1 or any(
            index_shape[d] != shape[d] for d in range(rank) if d != dim):
        raise RuleNotApplicable("only the one-hot scatter (index of size 1 along dim, x's size elsewhere) fuses; "
                                f"index is {index_shape} into {shape} along dim {dim}")
    if isinstance(src, Ref) and tuple(b.type_of(src).shape) != index_shape:
        raise RuleNotApplicable("a scatter source of another shape than its index")
    if not isinstance(src, (Ref, bool, int, float)):
        raise RuleNotApplicable(f"scatter source {src!r}")
    # An index outside [0, size) raises in eager; the comparison alone would keep x unchanged without a word.
    hit = b.pointwise("eq", b.iota(shape, dim, torch.int64), b.checked(index, shape[dim]))
    value = src if isinstance(src, Ref) else b.fill(index_shape, src, b.type_of(x).dtype)
    return b.pointwise("where", hit, value, x, dtype=b.type_of(x).dtype)


def _constant_pad(b: Builder, x: Ref, pad: Sequence[int], value: Any = 0) -> Ref:
    """F.pad(x, pad, value=value): pad holds (before, after) pairs from the last dim back."""
    rank = b.type_of(x).rank
    if len(pad) % 2 or len(pad) // 2 > rank or not all(isinstance(p, int) for p in pad):
        raise RuleNotApplicable(f"padding {list(pad)}")
    before, after = [0] * rank, [0] * rank
    for pair in range(len(pad) // 2):
        before[rank - 1 - pair], after[rank - 1 - pair] = pad[2 * pair], pad[2 * pair + 1]
    if all(p == 0 for p in pad):
        return b.pointwise("copy", x)
    return b.pad(x, before, after, value if value is not None else 0)


def _roll(b: Builder, x: Ref, shifts: Sequence[int], dims: Sequence[int] = ()) -> Ref:
    rank = b.type_of(x).rank
    if not dims or len(dims) != len(shifts) or rank == 0:
        raise RuleNotApplicable("roll over the flattened tensor (no dims)")
    if not all(isinstance(s, int) for s in shifts):
        raise RuleNotApplicable("a symbolic roll shift")
    total: dict[int, int] = {}  # roll(x, (1, 2), (0, 0)) shifts dim 0 by 3
    for shift, dim in zip(shifts, dims):
        total[dim % rank] = total.get(dim % rank, 0) + shift
    return b.roll(x, list(total.values()), list(total))


def _in_range(b: Builder, shape: tuple[Dim, ...], dim: int, start: int, end: int) -> Ref:
    position = b.iota(shape, dim, torch.int64)
    return b.pointwise("logical_and", b.pointwise("ge", position, start), b.pointwise("lt", position, end))


def _slice_scatter(b: Builder, x: Ref, src: Ref, dim: int = 0, start: int | None = None, end: int | None = None,
                   step: int = 1) -> Ref:
    """x with x[start:end] along `dim` replaced by src (a slice's gradient, a write through a slice):
    where(start <= i < end, src read at i - start, x). A step other than 1 stays extern."""
    shape = tuple(b.type_of(x).shape)
    rank = len(shape)
    dim = dim % rank if rank else 0
    size = shape[dim] if rank else 1
    if step != 1 or not isinstance(size, int):
        raise RuleNotApplicable("a slice_scatter with a step, or along a symbolic dimension")
    start = 0 if start is None else start
    end = size if end is None else end
    start, end = (v + size if v < 0 else v for v in (start, end))
    start, end = max(0, min(start, size)), max(0, min(end, size))
    if not isinstance(start, int) or not isinstance(end, int) or end - start != b.type_of(src).shape[dim]:
        raise RuleNotApplicable("a slice_scatter whose source does not fill its slice")
    if end == start:
        return b.pointwise("copy", x)
    before, after = [0] * rank, [0] * rank
    before[dim], after[dim] = start, size - end
    placed = b.pad(b.cast(src, b.type_of(x).dtype), before, after, 0)
    return b.pointwise("where", _in_range(b, shape, dim, start, end), placed, x, dtype=b.type_of(x).dtype)


def _select_scatter(b: Builder, x: Ref, src: Ref, dim: int, index: int) -> Ref:
    """x with x.select(dim, index) replaced by src: where(i == index, src broadcast along dim, x)."""
    shape = tuple(b.type_of(x).shape)
    rank = len(shape)
    dim = dim % rank
    size = shape[dim]
    if not isinstance(size, int) or not isinstance(index, int):
        raise RuleNotApplicable("a select_scatter along a symbolic dimension")
    index = index + size if index < 0 else index
    src_shape = tuple(b.type_of(src).shape)
    spread = b.broadcast(b.reshape(b.cast(src, b.type_of(x).dtype), src_shape[:dim] + (1,) + src_shape[dim:]), shape)
    hit = b.pointwise("eq", b.iota(shape, dim, torch.int64), index)
    return b.pointwise("where", hit, spread, x, dtype=b.type_of(x).dtype)


INDEXING_RULES: dict[Any, Rule] = {
    aten.slice_scatter: _slice_scatter,
    aten.select_scatter: _select_scatter,
    aten.embedding: _embedding,
    aten.index: _index,
    aten.index_select: _index_select,
    aten.gather: _gather,
    aten.scatter: _scatter,
    aten.constant_pad_nd: _constant_pad,
    aten.roll: _roll,
}
