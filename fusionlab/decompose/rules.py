"""The decomposition rule table: `{aten op: rule}`. A rule receives the Builder and the op's arguments
(tensors as `Ref`s) and returns the value (or values) the op produces, built from primitives.

    >>> aten.silu in RULES
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Dim, Ref

aten = torch.ops.aten
RULES: dict[Any, Rule] = {}


def _scalar(value: Any) -> Any:
    if isinstance(value, Ref) or value is None:
        return value
    if isinstance(value, (bool, int, float)):
        return value
    raise RuleNotApplicable(f"operand {value!r} is neither a tensor nor a number")


def _float_operands(b: Builder, *values: Any) -> list[Any]:
    """Integer and bool tensors are promoted to the default float dtype (for true division, exp, ...)."""
    out = []
    for value in values:
        if isinstance(value, Ref) and not b.type_of(value).dtype.is_floating_point:
            value = b.cast(value, torch.get_default_dtype())
        out.append(value)
    return out


# -- elementwise arithmetic ---------------------------------------------------------------------------
def _binary(op: str) -> Rule:
    def rule(b: Builder, x: Any, y: Any) -> Ref:
        return b.pointwise(op, _scalar(x), _scalar(y))
    return rule


def _add(b: Builder, x: Any, y: Any, alpha: Any = 1) -> Ref:
    if alpha != 1:
        y = b.pointwise("mul", y, alpha)
    return b.pointwise("add", x, y)


def _sub(b: Builder, x: Any, y: Any, alpha: Any = 1) -> Ref:
    if alpha != 1:
        y = b.pointwise("mul", y, alpha)
    return b.pointwise("sub", x, y)


def _rsub(b: Builder, x: Any, y: Any, alpha: Any = 1) -> Ref:
    return _sub(b, y, x, alpha)  # `pointwise` takes a scalar on either side


def _div(b: Builder, x: Any, y: Any, rounding_mode: str | None = None) -> Ref:
    x, y = _scalar(x), _scalar(y)
    integral = not b.expected.dtype.is_floating_point
    if rounding_mode is None:
        x, y = _float_operands(b, x, y)
        return b.pointwise("div", x, y)
    if rounding_mode == "floor":
        return b.pointwise("floor_divide", x, y)
    if rounding_mode == "trunc" and not integral:
        return b.pointwise("trunc", b.pointwise("div", x, y))
    raise RuleNotApplicable(f"rounding_mode={rounding_mode!r} on integers")


def _pow(b: Builder, x: Any, y: Any) -> Ref:
    x, y = _scalar(x), _scalar(y)
    if not isinstance(y, Ref):
        if y == 2:
            return b.pointwise("mul", x, x)
        if y == 1:
            return b.pointwise("copy", x)
        if y == 0.5:
            return b.pointwise("sqrt", *_float_operands(b, x))
        if y == -1:
            return b.pointwise("reciprocal", *_float_operands(b, x))
        if y == 3:
            return b.pointwise("mul", b.pointwise("mul", x, x), x)
    if not b.expected.dtype.is_floating_point:
        raise RuleNotApplicable("integer pow")
    if not isinstance(x, Ref):
        x = b.full(x, y)
    return b.pointwise("pow", x, y)


for _name in ("mul", "maximum", "minimum", "fmod", "remainder", "floor_divide", "bitwise_and",
              "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
              "logical_xor"):
    RULES[getattr(aten, _name)] = _binary(_name)
RULES[aten.atan2] = lambda b, x, y: b.pointwise("atan2", *_float_operands(b, x, y))  # integers promote first
RULES[aten.add] = _add
RULES[aten.sub] = _sub
RULES[aten.rsub] = _rsub
RULES[aten.div] = _div
RULES[aten.true_divide] = lambda b, x, y: _div(b, x, y)
RULES[aten.pow] = _pow
def _nan_ignoring(op: str) -> Rule:
    """fmax/fmin: a NaN operand yields the other one (maximum/minimum propagate it)."""
    def rule(b: Builder, x: Ref, y: Ref) -> Ref:
        both = b.pointwise(op, x, y)
        return b.pointwise("where", b.pointwise("isnan", x), y, b.pointwise("where", b.pointwise("isnan", y), x,
                                                                           both))
    return rule


RULES[aten.fmax] = _nan_ignoring("maximum")
RULES[aten.fmin] = _nan_ignoring("minimum")


def _unary(op: str, floating: bool = True) -> Rule:
    def rule(b: Builder, x: Ref) -> Ref:
        operands = _float_operands(b, x) if floating else [x]
        return b.pointwise(op, *operands)
    return rule


for _name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfinv",
              "sigmoid", "reciprocal"):
    RULES[getattr(aten, _name)] = _unary(_name)
for _name in ("neg", "abs", "sign", "logical_not", "bitwise_not", "isnan", "isinf"):
    RULES[getattr(aten, _name)] = _unary(_name, floating=False)
for _name in ("floor", "ceil", "trunc"):
    RULES[getattr(aten, _name)] = lambda b, x, _op=_name: (
        b.pointwise(_op, x) if b.type_of(x).dtype.is_floating_point else b.pointwise("copy", x))
RULES[aten.sgn] = _unary("sign", floating=False)
RULES[aten.square] = lambda b, x: b.pointwise("mul", x, x)
RULES[aten.frac] = lambda b, x: b.pointwise("sub", x, b.pointwise("trunc", x))
RULES[aten.round] = lambda b, x, decimals=0: (b.pointwise("round", x) if decimals == 0 else
                                              b.pointwise("div", b.pointwise("round", b.pointwise(
                                                  "mul", x, 10.0 ** decimals)), 10.0 ** decimals))


def _where(b: Builder, condition: Ref, x: Any, y: Any) -> Ref:
    return b.pointwise("where", condition, _scalar(x), _scalar(y))


def _clamp(b: Builder, x: Ref, min: Any = None, max: Any = None) -> Ref:  # noqa: A002 - aten's names
    result = x
    if min is not None:
        result = b.pointwise("maximum", result, _scalar(min), dtype=b.expected.dtype)
    if max is not None:
        result = b.pointwise("minimum", result, _scalar(max), dtype=b.expected.dtype)
    return result if result is not x else b.pointwise("copy", x)


def _to_copy(b: Builder, x: Ref, dtype: torch.dtype | None = None, **kwargs: Any) -> Ref:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "meta":
        raise RuleNotApplicable("a copy to another device")
    return b.pointwise("copy", b.cast(x, dtype or b.type_of(x).dtype))


def _masked_fill(b: Builder, x: Ref, mask: Ref, value: Any) -> Ref:
    return b.pointwise("where", mask, _scalar(value), x, dtype=b.type_of(x).dtype)


def _scalar_tensor(b: Builder, value: Any, dtype: torch.dtype | None = None, **kwargs: Any) -> Ref:
    return b.constant(_scalar(value), dtype or b.expected.dtype)


RULES[aten.where] = _where
RULES[aten.scalar_tensor] = _scalar_tensor
RULES[aten.clamp] = _clamp
RULES[aten.clip] = _clamp
RULES[aten.clamp_min] = lambda b, x, min: _clamp(b, x, min=min)  # noqa: A006
RULES[aten.clamp_max] = lambda b, x, max: _clamp(b, x, max=max)  # noqa: A006
RULES[aten._to_copy] = _to_copy
# Products that read either order of their operands' last two dimensions at the same speed (cuBLAS transposes for
# free), and the views between a copy and such a product that keep those two dimensions.
_EITHER_ORDER = (aten.bmm, aten.mm, aten.baddbmm)
_ROW_VIEWS = (aten.view, aten._unsafe_view, aten.reshape)


def _feeds_products_only(node: Any) -> bool:
    """Every user of fx `node` reshapes only its leading dimensions, and every user of those is a product."""
    value = node.meta.get("val") if node is not None else None
    if value is None or value.dim() < 2 or not node.users:
        return False
    for view in node.users:
        shape = getattr(view.meta.get("val"), "shape", None)
        if getattr(view.target, "overloadpacket", None) not in _ROW_VIEWS or shape is None or not view.users \
                or tuple(shape[-2:]) != tuple(value.shape[-2:]):
            return False
        if any(getattr(user.target, "overloadpacket", None) not in _EITHER_ORDER for user in view.users):
            return False
    return True


def _clone(b: Builder, x: Ref, **kwargs: Any) -> Ref:
    """A copy. When it copies a transpose of the last two dimensions for a product (`q @ k.transpose(-2, -1)` makes
    aten copy k transposed before bmm), it copies k in its own order and hands the product a transposed view of
    the copy: both the read and the write stay contiguous (gpt_block: 0.018 -> about 0.009 ms, as Inductor), and
    the reshape of the leading dimensions after it is still a view."""
    producer = b.producer(x)
    rank = b.type_of(x).rank
    swap = (*range(rank - 2), rank - 1, rank - 2)
    if producer is not None and producer.op == "permute" and tuple(producer.param("dims")) == swap \
            and _feeds_products_only(b.node):
        source = producer.args[0]
        assert isinstance(source, Ref)
        return b.view("permute", b.pointwise("copy", source), b.type_of(x).shape, dims=swap)
    return b.pointwise("copy", x)


RULES[aten.clone] = _clone
RULES[aten.lift_fresh_copy] = lambda b, x: b.pointwise("copy", x)
RULES[aten.masked_fill] = _masked_fill
RULES[aten.lerp] = lambda b, x, end, weight: b.pointwise("add", x, b.pointwise("mul", _scalar(weight),
                                                                               b.pointwise("sub", end, x)))
RULES[aten.addcmul] = lambda b, x, t1, t2, value=1: b.pointwise(
    "add", x, b.pointwise("mul", value, b.pointwise("mul", t1, t2)))
RULES[aten.addcdiv] = lambda b, x, t1, t2, value=1: b.pointwise(
    "add", x, b.pointwise("mul", value, b.pointwise("div", t1, t2)))


# -- activations ------------------------------------------------------------------------------------
def _relu(b: Builder, x: Ref) -> Ref:
    return b.pointwise("maximum", x, 0)


def _gelu(b: Builder, x: Ref, approximate: str = "none") -> Ref:
    if approximate == "tanh":
        inner = b.pointwise("mul", math.sqrt(2.0 / math.pi),
                            b.pointwise("add", x, b.pointwise("mul", 0.044715,
                                                              b.pointwise("mul", b.pointwise("mul", x, x), x))))
        return b.pointwise("mul", b.pointwise("mul", x, 0.5), b.pointwise("add", b.pointwise("tanh", inner), 1.0))
    if approximate != "none":
        raise RuleNotApplicable(f"gelu approximate={approximate!r}")
    erf = b.pointwise("erf", b.pointwise("mul", x, 1.0 / math.sqrt(2.0)))
    return b.pointwise("mul", b.pointwise("mul", x, 0.5), b.pointwise("add", erf, 1.0))


def _softplus(b: Builder, x: Ref, beta: float = 1.0, threshold: float = 20.0) -> Ref:
    scaled = b.pointwise("mul", x, beta) if beta != 1 else x
    soft = b.pointwise("log1p", b.pointwise("exp", scaled))
    if beta != 1:
        soft = b.pointwise("div", soft, beta)
    return b.pointwise("where", b.pointwise("gt", scaled, threshold), x, soft)


def _mish(b: Builder, x: Ref) -> Ref:
    return b.pointwise("mul", x, b.pointwise("tanh", _softplus(b, x)))


def _leaky_relu(b: Builder, x: Ref, negative_slope: float = 0.01) -> Ref:
    return b.pointwise("where", b.pointwise("gt", x, 0), x, b.pointwise("mul", x, negative_slope))


def _hardtanh(b: Builder, x: Ref, min_val: float = -1.0, max_val: float = 1.0) -> Ref:
    return b.pointwise("minimum", b.pointwise("maximum", x, min_val), max_val)


def _hardsigmoid(b: Builder, x: Ref) -> Ref:
    return b.pointwise("div", _hardtanh(b, b.pointwise("add", x, 3.0), 0.0, 6.0), 6.0)


def _elu(b: Builder, x: Ref, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Ref:
    negative = b.pointwise("mul", b.pointwise("expm1", b.pointwise("mul", x, input_scale)), alpha)
    return b.pointwise("mul", b.pointwise("where", b.pointwise("gt", x, 0), x, negative), scale)


def _logit(b: Builder, x: Ref, eps: float | None = None) -> Ref:
    x = _float_operands(b, x)[0]
    if eps is not None:
        x = _clamp(b, x, eps, 1.0 - eps)
    return b.pointwise("log", b.pointwise("div", x, b.pointwise("sub", 1.0, x)))


RULES[aten.relu] = _relu
RULES[aten.gelu] = _gelu
RULES[aten.silu] = lambda b, x: b.pointwise("mul", x, b.pointwise("sigmoid", x))
RULES[aten.mish] = _mish
RULES[aten.softplus] = _softplus
RULES[aten.leaky_relu] = _leaky_relu
RULES[aten.hardtanh] = _hardtanh
RULES[aten.hardsigmoid] = _hardsigmoid
RULES[aten.hardswish] = lambda b, x: b.pointwise("mul", x, _hardsigmoid(b, x))
RULES[aten.elu] = _elu
RULES[aten.celu] = lambda b, x, alpha=1.0: _elu(b, x, alpha, 1.0, 1.0 / alpha)
RULES[aten.selu] = lambda b, x: _elu(b, x, 1.6732632423543772, 1.0507009873554805)
RULES[aten.logit] = _logit
RULES[aten.threshold] = lambda b, x, threshold, value: b.pointwise("where", b.pointwise("le", x, threshold),
                                                                   value, x)  # NaN stays NaN


# -- reductions -------------------------------------------------------------------------------------
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


def _var(b: Builder, x: Ref, dim: Any = None, *, correction: Any = None, keepdim: bool = False,
         unbiased: Any = None) -> Ref:
    correction = 1 if correction is None else correction
    dims = _dims(dim)
    x = _float_operands(b, x)[0]
    count = b.reduced_numel(x, dims)
    mean = b.reduce("mean", x, dims, True)
    centered = b.pointwise("sub", x, mean)
    squares = b.reduce("sum", b.pointwise("mul", centered, centered), dims, keepdim)
    return b.pointwise("div", squares, max(count - correction, 0))


def _std(b: Builder, x: Ref, dim: Any = None, **kwargs: Any) -> Ref:
    return b.pointwise("sqrt", _var(b, x, dim, **kwargs))


def _var_mean(b: Builder, x: Ref, dim: Any = None, **kwargs: Any) -> tuple[Ref, Ref]:
    return _var(b, x, dim, **kwargs), b.reduce("mean", x, _dims(dim), kwargs.get("keepdim", False))


def _logsumexp(b: Builder, x: Ref, dim: Any, keepdim: bool = False) -> Ref:
    x = _float_operands(b, x)[0]
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


RULES[aten.sum] = _sum
RULES[aten.mean] = _mean
RULES[aten.prod] = _prod
RULES[aten.amax] = _minmax("amax")
RULES[aten.amin] = _minmax("amin")
RULES[aten.argmax] = _minmax("argmax")
RULES[aten.argmin] = _minmax("argmin")
RULES[aten.max] = _max_dim("amax", "argmax")
RULES[aten.min] = _max_dim("amin", "argmin")
RULES[aten.var] = _var
RULES[aten.std] = _std
RULES[aten.var_mean] = _var_mean
RULES[aten.logsumexp] = _logsumexp
RULES[aten.linalg_vector_norm] = _vector_norm


# -- normalisation ----------------------------------------------------------------------------------
def _softmax(b: Builder, x: Ref, dim: int, half_to_float: bool = False) -> Ref:
    x = _float_operands(b, x)[0]
    shifted = b.pointwise("sub", x, b.reduce("amax", x, (dim,), True))
    exponent = b.pointwise("exp", shifted)
    return b.pointwise("div", exponent, b.reduce("sum", exponent, (dim,), True))


def _log_softmax(b: Builder, x: Ref, dim: int, half_to_float: bool = False) -> Ref:
    x = _float_operands(b, x)[0]
    shifted = b.pointwise("sub", x, b.reduce("amax", x, (dim,), True))
    total = b.reduce("sum", b.pointwise("exp", shifted), (dim,), True)
    return b.pointwise("sub", shifted, b.pointwise("log", total))


def _layer_norm(b: Builder, x: Ref, normalized_shape: Sequence[Dim], weight: Ref | None, bias: Ref | None,
                eps: float) -> tuple[Ref, Ref, Ref]:
    source_dtype = b.type_of(x).dtype
    x = b.cast(x, torch.float32) if source_dtype in (torch.float16, torch.bfloat16) else x
    axes = tuple(range(-len(normalized_shape), 0))
    mean = b.reduce("mean", x, axes, True)
    centered = b.pointwise("sub", x, mean)
    variance = b.reduce("mean", b.pointwise("mul", centered, centered), axes, True)
    rstd = b.pointwise("rsqrt", b.pointwise("add", variance, eps))
    out = b.pointwise("mul", centered, rstd)
    if weight is not None:
        out = b.pointwise("mul", out, weight, dtype=torch.float32)
    if bias is not None:
        out = b.pointwise("add", out, bias, dtype=torch.float32)
    return b.cast(out, source_dtype), mean, rstd


def _rms_norm(b: Builder, x: Ref, normalized_shape: Sequence[Dim], weight: Ref | None = None,
              eps: float | None = None) -> Any:
    source_dtype = b.type_of(x).dtype
    xf = b.cast(x, torch.float32)
    axes = tuple(range(-len(normalized_shape), 0))
    eps = torch.finfo(source_dtype).eps if eps is None else eps
    rstd = b.pointwise("rsqrt", b.pointwise("add", b.reduce("mean", b.pointwise("mul", xf, xf), axes, True), eps))
    out = b.pointwise("mul", xf, rstd)
    if weight is not None:
        out = b.pointwise("mul", out, weight, dtype=torch.float32)
    out = b.cast(out, source_dtype)
    return (out, rstd) if isinstance(b.expected, tuple) else out


RULES[aten._softmax] = _softmax
RULES[aten._log_softmax] = _log_softmax
RULES[aten.native_layer_norm] = _layer_norm
RULES[aten.rms_norm] = _rms_norm
if hasattr(aten, "_fused_rms_norm"):
    RULES[aten._fused_rms_norm] = _rms_norm


# -- views ------------------------------------------------------------------------------------------
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


for _op in (aten.view, aten._unsafe_view, aten.reshape, aten.unsqueeze, aten.squeeze, aten.flatten,
            aten.view_copy, aten.unflatten):
    RULES[_op] = _reshape
for _op in (aten.alias, aten.detach):
    RULES[_op] = lambda b, x: x
RULES[aten.permute] = _permute
RULES[aten.transpose] = _transpose
RULES[aten.t] = lambda b, x: _transpose(b, x, 0, 1) if b.type_of(x).rank == 2 else x
RULES[aten.expand] = _expand
RULES[aten.slice] = _slice
RULES[aten.select] = _select
RULES[aten.split] = _split
RULES[aten.split_with_sizes] = _split
RULES[aten.unbind] = _unbind


def _cat(b: Builder, tensors: Sequence[Any], dim: int = 0) -> Ref:
    """Concatenation in a kernel: each output element reads the input whose slice holds it."""
    expected = b.expected
    refs = [t for t in tensors if isinstance(t, Ref) and b.type_of(t).numel != 0]
    if len(refs) != len(tensors) or not refs:
        raise RuleNotApplicable("cat of empty or non-tensor inputs")
    rank = expected.rank
    dim = dim % rank
    sizes = []
    for ref in refs:
        size = b.type_of(ref).shape[dim]
        if not isinstance(size, int) and not getattr(size, "is_number", False):
            raise RuleNotApplicable("a concatenation along a symbolic dimension")
        sizes.append(int(size))
    refs = [b.cast(r, expected.dtype) for r in refs]
    return b._add("pointwise", "cat", tuple(refs), expected, {"dim": dim, "sizes": tuple(sizes)})


RULES[aten.cat] = _cat
