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

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.decompose.rules import RULES
from fusionlab.ir import Ref, TensorType

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


def _bias_joins_consumers(b: Builder, bias: Any) -> bool:
    """Every user of the product is an op generated into a kernel here, of the product's own shape (not a view,
    not an extern op, not the program's output), so an add of the bias joins that kernel."""
    node = b.node
    expected = b.expected
    if node is None or not isinstance(bias, Ref) or not isinstance(expected, TensorType) or not node.users:
        return False
    product = node.meta.get("val")
    if product is None or b.type_of(bias).dtype != expected.dtype:
        return False
    for user in node.users:
        value = user.meta.get("val") if user.op == "call_function" else None
        if value is None or _is_view(user.target) or getattr(value, "shape", None) != product.shape:
            return False
        if user.target not in RULES and getattr(user.target, "overloadpacket", None) not in RULES:
            return False
    return True


# cuBLAS on a matrix whose rows are not 16-byte aligned (GPT-2's 50257-word vocabulary in bf16) picks a slow kernel.
# On an H200 GPT-2's lm_head took 3.39 ms, and 0.52 with the weight padded by zero columns to a multiple of 8 and the
# product read through a slice; BERT's 30522-word decoder 0.79 -> 0.31 ms
# (benchmarks/results/2026-12-01-h200-mm-padding.json). Inductor pads the same way (0.56 ms). The backward's products
# read the vocabulary-wide gradient, whose rows are as unaligned: its contracted dimension is padded with zeros.
PAD_DEVICES = frozenset({"cuda"})
PAD_MIN_FLOPS = 1 << 32  # smaller products: the pad's copies cost more than they save
PAD_BYTES = 16


def _transposed(b: Builder, value: Ref) -> Ref | None:
    """The matrix `value` is the transpose of (a permute view), or None for a row-major value."""
    producer = b.producer(value)
    if producer is None or producer.op != "permute" or dict(producer.params).get("dims") != (1, 0):
        return None
    source = producer.args[0]
    return source if isinstance(source, Ref) else None


def _padding(b: Builder, x: Any, y: Any) -> tuple[int, int, int]:
    """Zeros to add to m, k and n of `x [m, k] @ y [k, n]` so each matrix cuBLAS reads or writes has
    PAD_BYTES-aligned rows: the output's are n long; a row-major `x`'s k (a transposed one's m); a row-major `y`'s n
    (a transposed one's k). (0, 0, 0) off PAD_DEVICES, for small products, and for unusual operands."""
    value = b.node.meta.get("val") if b.node is not None else None
    device = getattr(getattr(value, "device", None), "type", None)
    if device not in PAD_DEVICES or not isinstance(x, Ref) or not isinstance(y, Ref):
        return 0, 0, 0
    left, right = b.type_of(x), b.type_of(y)
    if left.rank != 2 or right.rank != 2 or left.dtype not in DOT_DTYPES or left.dtype != right.dtype:
        return 0, 0, 0
    (m, k), n = left.shape, right.shape[1]
    if not all(isinstance(d, int) for d in (m, k, n)) or m * n * k < PAD_MIN_FLOPS:
        return 0, 0, 0
    align = PAD_BYTES // left.itemsize
    x_transposed = _transposed(b, x) is not None
    needs_k = not x_transposed or _transposed(b, y) is not None
    return (-m % align if x_transposed else 0), (-k % align if needs_k else 0), -n % align


def _pad_matrix(b: Builder, value: Ref, rows: int, columns: int) -> Ref:
    """`value` with `rows` zero rows and `columns` zero columns after it; a transposed matrix is padded before its
    transpose, so the copy keeps its layout."""
    if not rows and not columns:
        return value
    source = _transposed(b, value)
    if source is None:
        return b.pad(value, (0, 0), (rows, columns), 0)
    (r, c) = b.type_of(value).shape
    return b.view("permute", b.pad(source, (0, 0), (columns, rows), 0), (r + rows, c + columns), dims=(1, 0))


def _padded_product(b: Builder, x: Ref, y: Ref, pad: tuple[int, int, int], bias: Ref | None = None) -> Ref:
    """`x @ y` (plus `bias`) in cuBLAS on operands padded with zeros by `pad` (m, k, n), read back through a
    slice: the zero columns of `x` meet the zero rows of `y`, so the sums are unchanged."""
    (m, k), n = b.type_of(x).shape, b.type_of(y).shape[1]
    pad_m, pad_k, pad_n = pad
    dtype = b.type_of(x).dtype
    out = TensorType((m + pad_m, n + pad_n), dtype, (n + pad_n, 1))
    padded = ", ".join(f"{name} {size} -> {size + extra}" for name, size, extra in
                       (("m", m, pad_m), ("k", k, pad_k), ("n", n, pad_n)) if extra)
    reason = (f"cuBLAS matmul (matmul='extern') on operands padded with zeros ({padded}): rows not {PAD_BYTES}-byte "
              f"aligned make cuBLAS slow")
    operands = (_pad_matrix(b, x, pad_m, pad_k), _pad_matrix(b, y, pad_k, pad_n))
    if bias is None:
        product = b.extern(aten.mm.default, operands, {}, reason, out=out)
    else:
        bias = b.pad(bias, (0,), (pad_n,), 0) if pad_n else bias
        product = b.extern(aten.addmm.default, (bias, *operands), {}, reason, out=out)
    if pad_n:
        product = b.view("slice", product, (m + pad_m, n), dim=1, start=0, step=1)
    if pad_m:
        product = b.view("slice", product, (m, n), dim=0, start=0, step=1)
    # Returned to the caller, the product has eager's strides (a copy): `logits.view(-1)` must work as in eager. So
    # does one that `as_strided` reads, which addresses the storage, not the slice.
    return b.pointwise("copy", product) if pad_n and _reaches_output(b.node) else product


# Reshapes whose schema does not say they alias (a 3-D `nn.Linear` is `mm` then `_unsafe_view`), read by IR views.
_RESHAPES = frozenset({aten._unsafe_view.default, aten.reshape.default})


def _reaches_output(node: Any) -> bool:
    """Whether the aten node's value, or a view of it, is an output of the captured program or read by
    `as_strided` (which takes the storage as it is)."""
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        for user in current.users:
            if user.op == "output" or "as_strided" in str(user.target):
                return True
            passes_through = _is_view(user.target) or user.target in _RESHAPES  # mm -> _unsafe_view -> output
            if user.op == "call_function" and passes_through and user not in seen:
                seen.add(user)
                pending.append(user)
    return False


def _mm_padded(b: Builder, x: Any, y: Any) -> Ref:
    """`aten.mm` with the weight padded when the product's rows would not be aligned; else the plain extern."""
    pad = _padding(b, x, y)
    if not any(pad):
        raise RuleNotApplicable("cuBLAS matmul (matmul='extern')")
    return _padded_product(b, x, y, pad)


def _addmm_bias_in_consumer(b: Builder, bias: Any, x: Any, y: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """With cuBLAS matmuls: `aten.mm` and the bias added in the kernel of the product's consumers, as Inductor does,
    when they are generated kernels that take it (`gelu(x @ w + b)`); else `aten.addmm` with the bias in cuBLAS's
    epilogue. On an H200 mm is 2-6% faster than addmm (benchmarks/results/2026-11-30-h200-mm-vs-addmm.json), and
    reading a bias row in a kernel that runs anyway costs next to nothing. A 3-D `nn.Linear` (addmm, then a reshape
    of its rows) keeps addmm: moving its bias after the reshape made gpt_block's products slower, not faster
    (cuBLAS's bias epilogue is free there: 0.535 ms of mm + addmm against 0.526 of addmm, docs/PERFORMANCE.md)."""
    pad = _padding(b, x, y)
    if not _bias_joins_consumers(b, bias):
        n = b.type_of(y).shape[1] if isinstance(y, Ref) else None
        if any(pad) and alpha == 1 and beta == 1 and isinstance(bias, Ref) and b.type_of(bias).shape == (n,):
            return _padded_product(b, x, y, pad, bias)
        raise RuleNotApplicable("the product's users do not all run in generated kernels of its shape, so the bias "
                                "stays in cuBLAS's epilogue (addmm)")
    if any(pad):
        return _plus_bias(b, _padded_product(b, x, y, pad), bias, alpha, beta)
    reason = "cuBLAS matmul (matmul='extern'); the bias is added in the kernel of the product's consumers"
    return _plus_bias(b, b.extern(aten.mm.default, (x, y), {}, reason), bias, alpha, beta)


EXTERN_MATMUL_RULES: dict[Any, Rule] = {aten.addmm: _addmm_bias_in_consumer, aten.mm: _mm_padded}


def decomposition_rules(matmul: str) -> dict[Any, Rule]:
    """The rule table for an exploration's `matmul` option: "extern" (cuBLAS between kernels) or "triton"."""
    if matmul not in MATMUL_MODES:
        raise ValueError(f"unknown matmul option {matmul!r}: use 'extern' (cuBLAS between kernels, the default) or "
                         "'triton' (a generated Triton matmul with its pointwise epilogue fused)")
    return RULES | EXTERN_MATMUL_RULES if matmul == "extern" else RULES | MATMUL_RULES
