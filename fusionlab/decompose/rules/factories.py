"""Factory rules: tensors made from nothing but their shape. Constants (`full`, `zeros`, `ones_like`, `new_full`, ...)
become the `full` primitive and ranges (`arange`, `prims.iota`) the `iota` primitive: neither reads memory, so each is
computed inside the kernel of the op that uses it (HF's `arange(T).unsqueeze(0).expand(B, T)` is index arithmetic
in its consumer's kernel, not a kernel of its own).

    >>> aten.arange in FACTORY_RULES
    True
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Ref

aten = torch.ops.aten
prims = torch.ops.prims


def _fill(b: Builder, value: Any) -> Ref:
    """The aten node's own output (shape, dtype) filled with `value`."""
    if isinstance(value, Ref):
        raise RuleNotApplicable("a fill value held in a tensor")
    return b.fill(b.expected.shape, value, b.expected.dtype)


def _arange(b: Builder, *bounds: Any, step: Any = 1, **kwargs: Any) -> Ref:
    """arange(end), arange(start, end), arange(start, end, step): the length is aten's own output shape."""
    if len(bounds) == 3:
        start, _, step = bounds
    elif len(bounds) == 2:
        start = bounds[0]
    elif len(bounds) == 1:
        start = 0
    else:
        raise RuleNotApplicable(f"arange with {len(bounds)} positional bounds")
    if isinstance(step, sympy.Basic):
        raise RuleNotApplicable("a symbolic arange step")
    return b.iota(b.expected.shape, 0, b.expected.dtype, start, step)


def _iota(b: Builder, length: Any, *, start: Any = 0, step: Any = 1, **kwargs: Any) -> Ref:
    return b.iota(b.expected.shape, 0, b.expected.dtype, start, step)


FACTORY_RULES: dict[Any, Rule] = {
    aten.arange: _arange,
    prims.iota: _iota,
    aten.full: lambda b, size, value, **kwargs: _fill(b, value),
    aten.full_like: lambda b, x, value, **kwargs: _fill(b, value),
    aten.new_full: lambda b, x, size, value, **kwargs: _fill(b, value),
    aten.new_zeros: lambda b, x, size, **kwargs: _fill(b, 0),
    aten.new_ones: lambda b, x, size, **kwargs: _fill(b, 1),
    aten.zeros: lambda b, size, **kwargs: _fill(b, 0),
    aten.ones: lambda b, size, **kwargs: _fill(b, 1),
    aten.zeros_like: lambda b, x, **kwargs: _fill(b, 0),
    aten.ones_like: lambda b, x, **kwargs: _fill(b, 1),
    aten.fill: lambda b, x, value: _fill(b, value),
}
