"""Normalisation rules: softmax, log_softmax, layer norm and RMS norm, as reductions over the normalised axes
with pointwise prologues and epilogues (half-precision values computed in float32).

    >>> aten.native_layer_norm in NORMALIZATION_RULES
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule
from fusionlab.decompose.rules.pointwise import float_operands
from fusionlab.ir import Dim, Ref

aten = torch.ops.aten


def _softmax(b: Builder, x: Ref, dim: int, half_to_float: bool = False) -> Ref:
    x = float_operands(b, x)[0]
    shifted = b.pointwise("sub", x, b.reduce("amax", x, (dim,), True))
    exponent = b.pointwise("exp", shifted)
    return b.pointwise("div", exponent, b.reduce("sum", exponent, (dim,), True))


def _log_softmax(b: Builder, x: Ref, dim: int, half_to_float: bool = False) -> Ref:
    x = float_operands(b, x)[0]
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


NORMALIZATION_RULES: dict[Any, Rule] = {
    aten._softmax: _softmax,
    aten._log_softmax: _log_softmax,
    aten.native_layer_norm: _layer_norm,
    aten.rms_norm: _rms_norm,
    **({aten._fused_rms_norm: _rms_norm} if hasattr(aten, "_fused_rms_norm") else {}),
}
