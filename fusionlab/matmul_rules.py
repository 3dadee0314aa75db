"""Decomposition rules for matrix products, used when an exploration asks for Triton matmuls (`matmul="triton"`).

A 2-D `aten.mm` becomes one `matmul` primitive; `aten.addmm` is that matmul plus the bias added through the
ordinary pointwise path (so the bias add is a matmul epilogue like any other). Dtypes `tl.dot` does not compute
well (float64, integers) and batched products (`aten.bmm`, for now) keep running in cuBLAS as extern ops, with the
reason recorded. With `matmul="extern"` (the default) the products run in cuBLAS, and `aten.addmm` becomes `aten.mm`
with the bias added in its consumers' kernel when they take it (else it stays one addmm call).

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
    return _plus_bias(b, _matmul(b, x, y), bias, alpha, beta)


def _plus_bias(b: Builder, product: Ref, bias: Any, alpha: Any, beta: Any) -> Ref:
    """`beta * bias + alpha * product` as pointwise nodes (addmm's scaling)."""
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


def _is_view(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


_RESHAPES = (aten.view, aten._unsafe_view, aten.reshape)


def _generated_users_of_shape(node: Any, shape: Any) -> bool:
    """Every user of fx `node` is an op generated into a kernel here (not a view, not an extern op, not the
    program's output) whose result has `shape`."""
    if not node.users:
        return False
    for user in node.users:
        value = user.meta.get("val") if user.op == "call_function" else None
        if value is None or _is_view(user.target) or getattr(value, "shape", None) != shape:
            return False
        if user.target not in RULES and getattr(user.target, "overloadpacket", None) not in RULES:
            return False
    return True


def _bias_site(b: Builder, bias: Any) -> tuple[int, ...] | None:
    """Where an add of the bias joins the kernel of the product's consumers: the product's own shape when its users
    are generated ops of that shape; the shape of a reshape that only splits its rows (a 3-D `nn.Linear`:
    [B*T, N] -> [B, T, N]) when every user is that reshape and its users are generated ops of its shape; else None
    (a kernel cannot take the add: the bias stays in cuBLAS's epilogue)."""
    node, expected = b.node, b.expected
    if node is None or not isinstance(bias, Ref) or not isinstance(expected, TensorType):
        return None
    if b.type_of(bias).dtype != expected.dtype:
        return None
    product = node.meta.get("val")
    if product is None:
        return None
    if _generated_users_of_shape(node, product.shape):
        return tuple(expected.shape)
    columns = expected.shape[-1]
    if b.type_of(bias).numel != columns:  # a [M, N] bias would have to be reshaped with the product
        return None
    shapes = {tuple(getattr(user.meta.get("val"), "shape", ())) for user in node.users}
    if len(shapes) != 1 or not all(getattr(user.target, "overloadpacket", None) in _RESHAPES for user in node.users):
        return None
    shape = shapes.pop()
    if len(shape) < 2 or shape[-1] != columns or not all(type(size) is int for size in shape):
        return None  # (with symbolic sizes the reshape stays a view between kernels)
    return shape if all(_generated_users_of_shape(user, torch.Size(shape)) for user in node.users) else None


def _addmm_bias_in_consumer(b: Builder, bias: Any, x: Any, y: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """With cuBLAS matmuls: `aten.mm` and the bias added in the kernel of the product's consumers, as Inductor does,
    when they are generated kernels that take it (`gelu(x @ w + b)`, also after a reshape of the rows, as in a 3-D
    `nn.Linear`); else `aten.addmm` with the bias in cuBLAS's epilogue. On an H200 mm is 2-6% faster than addmm
    (benchmarks/results/2026-11-30-h200-mm-vs-addmm.json), and reading a bias row in a kernel that runs anyway costs
    next to nothing."""
    site = _bias_site(b, bias)
    if site is None:
        raise RuleNotApplicable("the product's users do not all run in generated kernels of its shape, so the bias "
                                "stays in cuBLAS's epilogue (addmm)")
    reason = "cuBLAS matmul (matmul='extern'); the bias is added in the kernel of the product's consumers"
    product = b.extern(aten.mm.default, (x, y), {}, reason)
    shape = b.type_of(product).shape
    if site == tuple(shape):
        return _plus_bias(b, product, bias, alpha, beta)
    # The add runs after the users' reshape, where the kernel is; reshape(reshape(v)) folds to one reshape, so the
    # users' reshape of this result is the sum itself.
    rows = b.reshape(product, site)
    summed = _plus_bias(b, rows, b.reshape(bias, (shape[-1],)), alpha, beta)
    return b.reshape(summed, shape)


EXTERN_MATMUL_RULES: dict[Any, Rule] = {aten.addmm: _addmm_bias_in_consumer}


def decomposition_rules(matmul: str) -> dict[Any, Rule]:
    """The rule table for an exploration's `matmul` option: "extern" (cuBLAS between kernels) or "triton"."""
    if matmul not in MATMUL_MODES:
        raise ValueError(f"unknown matmul option {matmul!r}: use 'extern' (cuBLAS between kernels, the default) or "
                         "'triton' (a generated Triton matmul with its pointwise epilogue fused)")
    return RULES | EXTERN_MATMUL_RULES if matmul == "extern" else RULES | MATMUL_RULES
