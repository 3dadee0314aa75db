"""Activation rules: relu, gelu, silu, softplus and the rest, each a chain of pointwise primitives.

    >>> aten.silu in ACTIVATION_RULES
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.decompose.rules.pointwise import clamp, float_operands
from fusionlab.ir import Ref

aten = torch.ops.aten


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
    x = float_operands(b, x)[0]
    if eps is not None:
        x = clamp(b, x, eps, 1.0 - eps)
    return b.pointwise("log", b.pointwise("div", x, b.pointwise("sub", 1.0, x)))


ACTIVATION_RULES: dict[Any, Rule] = {
    aten.relu: _relu,
    aten.gelu: _gelu,
    aten.silu: lambda b, x: b.pointwise("mul", x, b.pointwise("sigmoid", x)),
    aten.mish: _mish,
    aten.softplus: _softplus,
    aten.leaky_relu: _leaky_relu,
    aten.hardtanh: _hardtanh,
    aten.hardsigmoid: _hardsigmoid,
    aten.hardswish: lambda b, x: b.pointwise("mul", x, _hardsigmoid(b, x)),
    aten.elu: _elu,
    aten.celu: lambda b, x, alpha=1.0: _elu(b, x, alpha, 1.0, 1.0 / alpha),
    aten.selu: lambda b, x: _elu(b, x, 1.6732632423543772, 1.0507009873554805),
    aten.logit: _logit,
    aten.threshold: lambda b, x, threshold, value: b.pointwise("where", b.pointwise("le", x, threshold),
                                                               value, x),  # NaN stays NaN
}
