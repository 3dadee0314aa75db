"""Decomposition rules for matrix products, used when an exploration asks for Triton matmuls (`matmul="triton"`).

A 2-D `aten.mm` becomes one `matmul` primitive; `aten.addmm` is that matmul plus the bias added through the
ordinary pointwise path (so the bias add is a matmul epilogue like any other). Dtypes `tl.dot` does not compute
well (float64, integers) and batched products (`aten.bmm`, for now) keep running in cuBLAS as extern ops, with the
reason recorded. With `matmul="extern"` (the default) these rules are not in the table at all.

    >>> table = decomposition_rules("triton")
    >>> torch.ops.aten.mm in table
    True
"""

from __future__ import annotations

from typing import Any

import torch

from fusionlab.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Ref, TensorType
from fusionlab.rules import RULES

aten = torch.ops.aten

MATMUL_MODES = ("extern", "triton")

# tl.dot runs these on tensor cores with a float32 accumulator; float64 and integer products stay in cuBLAS.
DOT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _matmul(b: Builder, x: Any, y: Any) -> Ref:
    if not isinstance(x, Ref) or not isinstance(y, Ref):
        raise RuleNotApplicable("a matrix product of non-tensors")
    left, right = b.type_of(x), b.type_of(y)
    if left.rank != 2 or right.rank != 2:
        raise RuleNotApplicable(f"a product of rank {left.rank} and rank {right.rank} tensors: the Triton matmul "
                                "takes 2-D operands (batched products run in cuBLAS)")
    if left.dtype != right.dtype:
        raise RuleNotApplicable(f"operands of different dtypes ({left.dtype}, {right.dtype})")
    if left.dtype not in DOT_DTYPES:
        raise RuleNotApplicable(f"tl.dot does not compute {left.dtype} products well (tensor cores take float32, "
                                "float16 and bfloat16): the matmul runs in cuBLAS")
    shape = (left.shape[0], right.shape[1])
    return b._add("matmul", "matmul", (x, y), TensorType(shape, left.dtype))


def _mm(b: Builder, x: Any, y: Any) -> Ref:
    return _matmul(b, x, y)


def _addmm(b: Builder, bias: Any, x: Any, y: Any, *, beta: Any = 1, alpha: Any = 1) -> Ref:
    """`beta * bias + alpha * (x @ y)`; the bias add is a pointwise node, fused as the matmul's epilogue."""
    product = _matmul(b, x, y)
    if alpha != 1:
        product = b.pointwise("mul", product, alpha)
    if beta == 0:
        return product  # PyTorch ignores the bias (even NaN) when beta is 0
    if beta != 1:
        bias = b.pointwise("mul", bias, beta)
    return b.pointwise("add", product, bias)


def _two_d_matmul(b: Builder, x: Any, y: Any) -> Ref:
    """`aten.matmul` on two matrices (other ranks keep running in eager PyTorch)."""
    return _matmul(b, x, y)


MATMUL_RULES: dict[Any, Rule] = {aten.mm: _mm, aten.addmm: _addmm, aten.matmul: _two_d_matmul}


def decomposition_rules(matmul: str) -> dict[Any, Rule]:
    """The rule table for an exploration's `matmul` option: "extern" (cuBLAS between kernels) or "triton"."""
    if matmul not in MATMUL_MODES:
        raise ValueError(f"unknown matmul option {matmul!r}: use 'extern' (cuBLAS between kernels, the default) or "
                         "'triton' (a generated Triton matmul with its pointwise epilogue fused)")
    return RULES if matmul == "extern" else RULES | MATMUL_RULES
