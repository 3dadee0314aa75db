"""Reduction rules: sum, mean, prod, max/min and their arg forms become reduction primitives; all/any (counts),
var, std, logsumexp and the vector norm are built from them and pointwise primitives.

    >>> aten.var_mean in REDUCTION_RULES
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fusionlab.decompose import hoist
from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable, compute_dtype
from fusionlab.decompose.rules.pointwise import float_operands
from fusionlab.decompose.split import SplitPlan
from fusionlab.ir import Ref

aten = torch.ops.aten


def _dims(dim: Any) -> tuple[int, ...]:
    if dim is None:
        return ()
    if isinstance(dim, int):
        return (dim,)
    return tuple(dim)


def _sum(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Ref:
    return b.reduce("sum", x, _dims(dim), keepdim, dtype)


def _mean(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Ref:
    return b.reduce("mean", x, _dims(dim), keepdim, dtype)


def _prod(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Ref:
    return b.reduce("prod", x, _dims(dim), keepdim, dtype)


def _minmax(op: str) -> Rule:
    def rule(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False) -> Ref:
        return b.reduce(op, x, _dims(dim), keepdim)
    return rule


def _max_dim(op: str, index_op: str) -> Rule:
    def rule(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False) -> Any:
        if dim is None:
            return b.reduce(op, x, (), False)
        return b.reduce(op, x, (dim,), keepdim), b.reduce(index_op, x, (dim,), keepdim)
    return rule


def _all(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False) -> Ref:
    """Whether every element is non-zero: no element is zero (a count of zeros; NaN counts as non-zero)."""
    return b.pointwise("eq", b.reduce("sum", b.pointwise("logical_not", x), _dims(dim), keepdim), 0)


def _any(b: Builder, x: Ref, dim: Any = None, keepdim: bool = False) -> Ref:
    """Whether some element is non-zero: a count of non-zero elements."""
    return b.pointwise("ne", b.reduce("sum", b.pointwise("ne", x, 0), _dims(dim), keepdim), 0)


def _var(b: Builder, x: Ref, dim: Any = None, *, correction: Any = None, keepdim: bool = False,
         unbiased: Any = None) -> Ref:
    return _variance_and_mean(b, x, dim, correction, keepdim)[0]


def _variance_and_mean(b: Builder, x: Ref, dim: Any, correction: Any, keepdim: bool) -> tuple[Ref, Ref]:
    """The variance and the mean it is centred on (reduced axes kept, size 1)."""
    correction = 1 if correction is None else correction
    dims = _dims(dim)
    x = float_operands(b, x)[0]
    count = b.reduced_numel(x, dims)
    plan = b.split_plan(x, dims)
    if plan is not None:
        return _split_variance_and_mean(b, x, dims, plan, count - correction, keepdim)
    mean = b.reduce("mean", x, dims, True)
    centered = b.pointwise("sub", x, mean)
    squares = b.reduce("sum", b.pointwise("mul", centered, centered), dims, keepdim)
    return b.pointwise("div", squares, max(count - correction, 0)), mean


def _split_variance_and_mean(b: Builder, x: Ref, dims: tuple[int, ...], plan: SplitPlan, divisor: Any,
                             keepdim: bool) -> tuple[Ref, Ref]:
    """A variance split as a sum is (decompose/split.py), in one pass over `x` as one kernel's Welford pass is: each
    part's mean and sum of squared deviations (one kernel), then the parts combined (Chan et al.'s rule for parts of
    n elements each: M2 = sum(M2_part) + n * sum((mean_part - mean)^2)). Computed in float32, then rounded."""
    dtype = b.type_of(x).dtype
    parts = hoist.reshaped(b, b.cast(x, compute_dtype(dtype)), plan.shape)
    size = math.prod(plan.shape[a] for a in plan.first)
    part_mean = b.partial("mean", parts, plan.first)
    deviation = b.pointwise("sub", parts, part_mean)
    part_m2 = b.partial("sum", b.pointwise("mul", deviation, deviation), plan.first)
    mean = b.reduce("mean", part_mean, plan.second, True)
    spread = b.pointwise("sub", part_mean, mean)
    spread = b.reduce("sum", b.pointwise("mul", spread, spread), plan.second, True)
    m2 = b.pointwise("add", b.reduce("sum", part_m2, plan.second, True), b.pointwise("mul", spread, size))
    rank = b.type_of(x).rank
    axes = {a % rank for a in dims} if dims else set(range(rank))
    kept = tuple(1 if i in axes else d for i, d in enumerate(b.type_of(x).shape))
    variance = b.reshape(b.pointwise("div", m2, max(divisor, 0)), kept if keepdim else _squeezed(kept, axes))
    return b.cast(variance, dtype), b.cast(b.reshape(mean, kept), dtype)


def _squeezed(shape: tuple[Any, ...], axes: set[int]) -> tuple[Any, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _std(b: Builder, x: Ref, dim: Any = None, **kwargs: Any) -> Ref:
    return b.pointwise("sqrt", _var(b, x, dim, **kwargs))


def _var_mean(b: Builder, x: Ref, dim: Any = None, **kwargs: Any) -> tuple[Ref, Ref]:
    # The mean returned is the one the variance is centred on (one reduction, not two: a looped kernel's Welford
    # pass writes it, where a second mean read the input again in a kernel of its own).
    keepdim = kwargs.get("keepdim", False)
    variance, mean = _variance_and_mean(b, x, dim, kwargs.get("correction"), keepdim)
    return variance, mean if keepdim else b.reshape(mean, b.type_of(variance).shape)


def _logsumexp(b: Builder, x: Ref, dim: Any, keepdim: bool = False) -> Ref:
    x = float_operands(b, x)[0]
    top = b.reduce("amax", x, _dims(dim), True)
    safe = b.pointwise("where", b.pointwise("isinf", top), 0.0, top)
    total = b.reduce("sum", b.pointwise("exp", b.pointwise("sub", x, safe)), _dims(dim), True)
    result = b.pointwise("add", b.pointwise("log", total), safe)
    if not keepdim:
        result = b.reshape(result, b.expected.shape)
    return result


def _vector_norm(b: Builder, x: Ref, ord: Any = 2, dim: Any = None, keepdim: bool = False,  # noqa: A002
                 dtype: Any = None) -> Ref:
    if ord != 2:
        raise RuleNotApplicable(f"vector norm of order {ord}")
    return b.pointwise("sqrt", b.reduce("sum", b.pointwise("mul", x, x), _dims(dim), keepdim))


REDUCTION_RULES: dict[Any, Rule] = {
    aten.sum: _sum,
    aten.mean: _mean,
    aten.prod: _prod,
    aten.amax: _minmax("amax"),
    aten.amin: _minmax("amin"),
    aten.argmax: _minmax("argmax"),
    aten.argmin: _minmax("argmin"),
    aten.all: _all,
    aten.any: _any,
    aten.max: _max_dim("amax", "argmax"),
    aten.min: _max_dim("amin", "argmin"),
    aten.var: _var,
    aten.std: _std,
    aten.var_mean: _var_mean,
    aten.logsumexp: _logsumexp,
    aten.linalg_vector_norm: _vector_norm,
}
