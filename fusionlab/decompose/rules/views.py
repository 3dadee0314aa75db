"""View rules: reshapes, permutes, expands, slices and selects become view primitives (split and unbind are
slices and selects of one input); a concatenation is a pointwise `cat` that reads, for each output element, the
input whose slice holds it.

    >>> aten.transpose in VIEW_RULES
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Ref

aten = torch.ops.aten


def _reshape(b: Builder, x: Ref, *args: Any, **kwargs: Any) -> Ref:
    return b.reshape(x, b.expected.shape)


def _permute(b: Builder, x: Ref, dims: Sequence[int]) -> Ref:
    rank = b.type_of(x).rank
    dims = tuple(d % rank for d in dims)
    if dims == tuple(range(rank)):
        return x
    return b.view("permute", x, b.expected.shape, dims=dims)


def _transpose(b: Builder, x: Ref, dim0: int, dim1: int) -> Ref:
    rank = b.type_of(x).rank
    order = list(range(rank))
    if rank:
        order[dim0 % rank], order[dim1 % rank] = order[dim1 % rank], order[dim0 % rank]
    return _permute(b, x, order)


def _expand(b: Builder, x: Ref, *args: Any, **kwargs: Any) -> Ref:
    return b.broadcast(x, tuple(b.expected.shape))


def _slice(b: Builder, x: Ref, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Ref:
    rank = b.type_of(x).rank
    size = b.type_of(x).shape[dim % rank]
    start = 0 if start is None else start
    if not isinstance(start, int):
        raise RuleNotApplicable("a symbolic slice start")
    if start < 0:
        start = start + size
    if b.expected.shape == b.type_of(x).shape:
        return x
    return b.view("slice", x, b.expected.shape, dim=dim % rank, start=max(int(start), 0), step=step)


def _select(b: Builder, x: Ref, dim: int, index: int) -> Ref:
    rank = b.type_of(x).rank
    if index < 0:
        index = index + b.type_of(x).shape[dim % rank]
    return b.view("select", x, b.expected.shape, dim=dim % rank, index=int(index))


def _split(b: Builder, x: Ref, split: Any, dim: int = 0) -> tuple[Ref, ...]:
    rank = b.type_of(x).rank
    results = []
    start = 0
    for expected in b.expected:
        length = expected.shape[dim % rank]
        results.append(b.view("slice", x, expected.shape, dim=dim % rank, start=start, step=1))
        start = start + length
    return tuple(results)


def _unbind(b: Builder, x: Ref, dim: int = 0) -> tuple[Ref, ...]:
    rank = b.type_of(x).rank
    return tuple(b.view("select", x, expected.shape, dim=dim % rank, index=i) for i, expected in
                 enumerate(b.expected))


def _cat(b: Builder, tensors: Sequence[Any], dim: int = 0) -> Ref:
    """Concatenation in a kernel: each output element reads the input whose slice holds it. Empty inputs (HF's
    DynamicCache starts from a (B, H, 0, D) cache, and legacy (0,)-shaped tensors) add no element: they are dropped,
    and still count in the result's dtype (aten's output type, which every input is cast to)."""
    expected = b.expected
    if not all(isinstance(t, Ref) for t in tensors):
        raise RuleNotApplicable("cat of non-tensor inputs")
    refs = [t for t in tensors if b.type_of(t).numel != 0]
    if not refs:  # every input is empty: so is the result
        return b.fill(expected.shape, 0, expected.dtype)
    rank = expected.rank
    dim = dim % rank
    if len(refs) == 1:
        return b.pointwise("copy", b.cast(refs[0], expected.dtype))
    sizes = []
    for ref in refs:
        size = b.type_of(ref).shape[dim]
        if not isinstance(size, int) and not getattr(size, "is_number", False):
            raise RuleNotApplicable("a concatenation along a symbolic dimension")
        sizes.append(int(size))
    refs = [b.cast(r, expected.dtype) for r in refs]
    return b._add("pointwise", "cat", tuple(refs), expected, {"dim": dim, "sizes": tuple(sizes)})


VIEW_RULES: dict[Any, Rule] = {
    **dict.fromkeys((aten.view, aten._unsafe_view, aten.reshape, aten.unsqueeze, aten.squeeze, aten.flatten,
                     aten.view_copy, aten.unflatten), _reshape),
    aten.alias: lambda b, x: x,
    aten.detach: lambda b, x: x,
    aten.permute: _permute,
    aten.transpose: _transpose,
    aten.t: lambda b, x: _transpose(b, x, 0, 1) if b.type_of(x).rank == 2 else x,
    aten.expand: _expand,
    aten.slice: _slice,
    aten.select: _select,
    aten.split: _split,
    aten.split_with_sizes: _split,
    aten.unbind: _unbind,
    aten.cat: _cat,
}
