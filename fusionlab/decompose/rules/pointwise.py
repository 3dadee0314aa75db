"""Pointwise rules: arithmetic, comparisons, the math functions, selection (`where`, `clamp`, `masked_fill`) and
the fused multiply-adds, each built from pointwise primitives.

    >>> aten.add in POINTWISE_RULES
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Ref

aten = torch.ops.aten


def _scalar(value: Any) -> Any:
    if isinstance(value, Ref) or value is None:
        return value
    if isinstance(value, (bool, int, float)):
        return value
    raise RuleNotApplicable(f"operand {value!r} is neither a tensor nor a number")


def float_operands(b: Builder, *values: Any) -> list[Any]:
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
        x, y = float_operands(b, x, y)
        return b.pointwise("div", x, y)
    if rounding_mode == "floor":
        return b.pointwise("floor_divide", x, y)
    if rounding_mode == "trunc" and not integral:
        return _trunc_divide(b, x, y)
    raise RuleNotApplicable(f"rounding_mode={rounding_mode!r} on integers")


def _trunc_divide(b: Builder, x: Any, y: Any) -> Ref:
    """`torch.div(x, y, rounding_mode="trunc")` of floats as eager's kernels compute it. The operands in the
    result's dtype first (eager's TensorIterator converts them: an int64 dividend or divisor beside bfloat16 is rounded
    to bfloat16), then widened; the quotient correctly rounded (`div_rn`: Triton's float32 `/` is not). By a tensor,
    the quotient in the result's dtype (a half one rounded to it: aten divides two half scalars), then truncated. By a
    divisor eager takes as a scalar, in the accumulate type (float32 for half precision), then truncated and rounded
    once: on CUDA a Python number, as `x * (1 / y)` (its kernel's reciprocal); on a CPU, for half precision, a number
    or a divisor TensorIterator finds to be one (`_cpu_scalar`), read at its own precision."""
    result = b.expected.dtype
    accumulate = torch.float64 if result == torch.float64 else torch.float32
    cpu = _on_cpu(b)
    x = _operand_in(b, x, result, accumulate)
    if not cpu and not isinstance(y, Ref):
        inverse = torch.tensor(1.0, dtype=accumulate) / torch.tensor(y, dtype=accumulate)
        return b.pointwise("trunc", b.pointwise("mul", x, float(inverse)), dtype=result)
    half = result in (torch.float16, torch.bfloat16)
    scalar = half and cpu and (not isinstance(y, Ref) or _cpu_scalar(b, y))
    if scalar:  # (TensorIterator's original scalar value: the divisor at its own precision)
        y = b.cast(y, accumulate) if isinstance(y, Ref) else y
    else:
        y = _operand_in(b, y, result, accumulate)
    quotient = b.pointwise("div_rn" if accumulate == torch.float32 else "div", x, y)  # (float64's `/` is exact)
    if half and not scalar:
        quotient = b.cast(quotient, result)
    return b.pointwise("trunc", quotient, dtype=result)


def _operand_in(b: Builder, value: Any, dtype: torch.dtype, accumulate: torch.dtype) -> Any:
    """An operand of a truncating division as eager's kernel reads it: converted to the result's `dtype` (a half
    one rounded), then to `accumulate`; a number rounded to `dtype`."""
    if isinstance(value, Ref):
        return b.cast(b.cast(value, dtype), accumulate)
    return float(torch.tensor(value, dtype=dtype))


def _cpu_scalar(b: Builder, value: Ref) -> bool:
    """Whether eager's CPU kernel takes the divisor as a scalar (TensorIterator's `is_scalar`): as the trace saw it
    (eager's strides), stride 0 along every dimension of the result wider than 1, after its conversion to the
    result's dtype, which makes a dense copy of anything but a single element (an expanded int64 divisor beside
    bfloat16 is no scalar). Read from the IR where the trace has no concrete value."""
    node = b.node
    arg = node.args[1] if node is not None and len(node.args) > 1 else None
    divisor = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    out = node.meta.get("val") if node is not None else None
    if not isinstance(divisor, torch.Tensor) or not isinstance(out, torch.Tensor) or any(
            not isinstance(d, int) for d in (*divisor.shape, *divisor.stride(), *out.shape)):
        return _one_element(b, value)
    if math.prod(divisor.shape) == 1:
        return True
    if divisor.dtype != out.dtype:
        return False
    offset = len(out.shape) - len(divisor.shape)
    return all(size == 1 or stride == 0 or out.shape[offset + i] == 1
               for i, (size, stride) in enumerate(zip(divisor.shape, divisor.stride(), strict=True)))


def _one_element(b: Builder, value: Ref) -> bool:
    """One element, or one element expanded (a stride-0 view or input): what eager's TensorIterator takes as a
    scalar operand."""
    node = b.producer(value)
    while node is not None and node.kind == "view" and node.op == "expand" and node.inputs:
        value = Ref(node.inputs[0])
        node = b.producer(value)
    kind = b.type_of(value)
    if kind.strides is not None and all(s == 0 for s, d in zip(kind.strides, kind.shape, strict=True) if d != 1):
        return True  # an input expanded by the caller
    return all(isinstance(d, int) and d == 1 for d in kind.shape)


def _on_cpu(b: Builder) -> bool:
    """Whether the aten node being decomposed runs on a CPU (its result's device)."""
    value = b.node.meta.get("val") if b.node is not None else None
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"


def _pow(b: Builder, x: Any, y: Any) -> Ref:
    x, y = _scalar(x), _scalar(y)
    if not isinstance(y, Ref):
        if y == 2:
            return b.pointwise("mul", x, x)
        if y == 1:
            return b.pointwise("copy", x)
        if y == 0.5:
            return b.pointwise("sqrt", *float_operands(b, x))
        if y == -1:
            return b.pointwise("reciprocal", *float_operands(b, x))
        if y == 3:
            return b.pointwise("mul", b.pointwise("mul", x, x), x)
    if not b.expected.dtype.is_floating_point:
        raise RuleNotApplicable("integer pow")
    if not isinstance(x, Ref):
        x = b.full(x, y)
    return b.pointwise("pow", x, y)


def _nan_ignoring(op: str) -> Rule:
    """fmax/fmin: a NaN operand yields the other one (maximum/minimum propagate it)."""
    def rule(b: Builder, x: Ref, y: Ref) -> Ref:
        both = b.pointwise(op, x, y)
        return b.pointwise("where", b.pointwise("isnan", x), y, b.pointwise("where", b.pointwise("isnan", y), x,
                                                                           both))
    return rule


def _unary(op: str, floating: bool = True) -> Rule:
    def rule(b: Builder, x: Ref) -> Ref:
        operands = float_operands(b, x) if floating else [x]
        return b.pointwise(op, *operands)
    return rule


def _where(b: Builder, condition: Ref, x: Any, y: Any) -> Ref:
    return b.pointwise("where", condition, _scalar(x), _scalar(y))


def clamp(b: Builder, x: Ref, min: Any = None, max: Any = None) -> Ref:  # noqa: A002 - aten's names
    result = x
    if min is not None:
        result = b.pointwise("maximum", result, _scalar(min), dtype=b.expected.dtype)
    if max is not None:
        result = b.pointwise("minimum", result, _scalar(max), dtype=b.expected.dtype)
    return result if result is not x else b.pointwise("copy", x)


def _masked_fill(b: Builder, x: Ref, mask: Ref, value: Any) -> Ref:
    return b.pointwise("where", mask, _scalar(value), x, dtype=b.type_of(x).dtype)


def _scalar_tensor(b: Builder, value: Any, dtype: torch.dtype | None = None, **kwargs: Any) -> Ref:
    return b.constant(_scalar(value), dtype or b.expected.dtype)


_BINARY = ("mul", "maximum", "minimum", "fmod", "remainder", "floor_divide", "bitwise_and", "bitwise_or", "bitwise_xor",
           "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor")
_FLOATING_UNARY = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
                   "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfinv",
                   "sigmoid", "reciprocal")
_UNARY = ("neg", "abs", "sign", "logical_not", "bitwise_not", "isnan", "isinf")

POINTWISE_RULES: dict[Any, Rule] = {
    **{getattr(aten, name): _binary(name) for name in _BINARY},
    aten.atan2: lambda b, x, y: b.pointwise("atan2", *float_operands(b, x, y)),  # integers promote first
    aten.add: _add,
    aten.sub: _sub,
    aten.rsub: _rsub,
    aten.div: _div,
    aten.true_divide: lambda b, x, y: _div(b, x, y),
    aten.pow: _pow,
    aten.fmax: _nan_ignoring("maximum"),
    aten.fmin: _nan_ignoring("minimum"),
    **{getattr(aten, name): _unary(name) for name in _FLOATING_UNARY},
    **{getattr(aten, name): _unary(name, floating=False) for name in _UNARY},
    **{getattr(aten, name): lambda b, x, _op=name: (
        b.pointwise(_op, x) if b.type_of(x).dtype.is_floating_point else b.pointwise("copy", x))
       for name in ("floor", "ceil", "trunc")},
    aten.sgn: _unary("sign", floating=False),
    aten.square: lambda b, x: b.pointwise("mul", x, x),
    aten.frac: lambda b, x: b.pointwise("sub", x, b.pointwise("trunc", x)),
    aten.round: lambda b, x, decimals=0: (b.pointwise("round", x) if decimals == 0 else
                                          b.pointwise("div", b.pointwise("round", b.pointwise(
                                              "mul", x, 10.0 ** decimals)), 10.0 ** decimals)),
    aten.where: _where,
    aten.scalar_tensor: _scalar_tensor,
    aten.clamp: clamp,
    aten.clip: clamp,
    aten.clamp_min: lambda b, x, min: clamp(b, x, min=min),  # noqa: A006
    aten.clamp_max: lambda b, x, max: clamp(b, x, max=max),  # noqa: A006
    aten.masked_fill: _masked_fill,
    aten.lerp: lambda b, x, end, weight: b.pointwise("add", x, b.pointwise("mul", _scalar(weight),
                                                                           b.pointwise("sub", end, x))),
    aten.addcmul: lambda b, x, t1, t2, value=1: b.pointwise(
        "add", x, b.pointwise("mul", value, b.pointwise("mul", t1, t2))),
    aten.addcdiv: lambda b, x, t1, t2, value=1: b.pointwise(
        "add", x, b.pointwise("mul", value, b.pointwise("div", t1, t2))),
}
