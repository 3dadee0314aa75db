"""Attention written as matrix products and a softmax, matched and run as PyTorch's fused attention.

`softmax(q @ k.transpose(-2, -1) * scale + mask) @ v` traces to two batched products around a softmax: the score
matrix [B, H, T, S] is written by one product, read and written by the softmax, read by the other product. The fused
attention kernels (flash, memory-efficient, cuDNN: `F.scaled_dot_product_attention`) never store it. User code and
models write attention this way (a ViT through torch.compile reaches the aten graph as bmm, softmax, bmm, in
Inductor's graph as in ours), so decomposition matches the pattern on the aten graph and makes the second product
one extern call of `aten.scaled_dot_product_attention`: the dispatcher picks the fused kernel for the device, as
eager does. The graph then shows one "attention" extern instead of two products and a softmax kernel.

Matched, on 4-D q, k, v: the products' operands are q (or q times a number), k transposed on its last two dims,
and v, each broadcast (and copied) and viewed as [B * H, ...]; between the products a multiplication or division
by a number, an optional additive mask (after the scaling: `attn_mask` adds there), the softmax over the last dim,
casts around it, and a copy after it (dropout in eval mode). Every value inside the pattern must have no other
reader: attention probabilities a model also returns, or keeps for a backward pass, keep the products and the
softmax.

    >>> found = match(graph_module)        # {the second product's node name: Attention(q, k, v, scale, mask)}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from fusionlab.capture.constants import NotConstant, evaluate

aten = torch.ops.aten

REASON = ("is softmax(q @ k^T * scale + mask) @ v, matched as one attention (decompose/attention.py): runs PyTorch's "
          "fused attention kernel (flash / memory-efficient / cuDNN), which never stores the score matrix")

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_WHERES = {getattr(aten.where, name) for name in ("self", "ScalarSelf", "ScalarOther", "Scalar")
           if hasattr(aten.where, name)}
_SCALINGS = {aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar}
# _safe_softmax (the math attention's: a row of -inf gives zeros) where it exists
_SOFTMAX = {aten._softmax.default} | ({aten._safe_softmax.default} if hasattr(aten, "_safe_softmax") else set())


@dataclass(frozen=True)
class Attention:
    """The second product computes `scaled_dot_product_attention(q, k, v, mask, scale=scale)` viewed as its
    [B * H, T, Dv] output."""

    q: torch.fx.Node
    k: torch.fx.Node
    v: torch.fx.Node
    scale: float
    mask: torch.fx.Node | None
    safe: bool = False  # a safe softmax: a row masked throughout gives zeros, not eager softmax's NaN


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """PyTorch's attention with an additive mask, and eager's NaN where a row's mask is -inf throughout (its softmax
    is 0 / 0; the fused kernels give zeros or NaN, by kernel)."""
    return _with_dead_rows(q, k, v, mask, scale, float("nan"))


def safe_masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                          scale: float) -> torch.Tensor:
    """PyTorch's attention with an additive mask, and zeros where a row's mask is -inf throughout, as a safe
    softmax gives them (PyTorch's math attention: `_safe_softmax`)."""
    return _with_dead_rows(q, k, v, mask, scale, 0.0)


def _with_dead_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
                    fill: float) -> torch.Tensor:
    out = torch.ops.aten.scaled_dot_product_attention.default(q, k, v, attn_mask=mask, scale=scale)
    return out.masked_fill_(torch.isneginf(mask).all(-1, keepdim=True), fill)


def match(graph_module: torch.fx.GraphModule) -> dict[str, Attention]:
    found: dict[str, Attention] = {}
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target is aten.bmm.default:
            attention = _attention(node)
            if attention is not None:
                found[node.name] = attention
    return found


def _attention(product: torch.fx.Node) -> Attention | None:
    probabilities, v = (_batched(a) for a in _args(product)[:2])
    if probabilities is None or v is None:
        return None
    found = _softmax_input(probabilities)
    if found is None:
        return None
    scores, readers, safe = found
    scores, mask = _without_mask(scores, readers)
    if mask is not None:
        readers = 1  # the mask's addition alone reads the scores
    unscaled, scale = _without_scale(scores)
    if unscaled is None or len(_users(unscaled)) != readers or unscaled.target not in _VIEWS:
        return None
    first = _args(unscaled)[0]
    if not (isinstance(first, torch.fx.Node) and first.target is aten.bmm.default and _sole(first)):
        return None
    q, k_transposed = (_batched(a) for a in _args(first)[:2])
    if q is None or k_transposed is None:
        return None
    q, q_scale = _without_scale(q, sole=True)
    k_transposed, k_scale = _without_scale(k_transposed, sole=True)  # the math path scales q and k by sqrt(scale)
    k = _untransposed(k_transposed) if k_transposed is not None else None
    if q is None or k is None:
        return None
    upcast = q, k, v
    q, k, v = _without_upcast(product, q, k, v)
    if mask is not None and q is not upcast[0] and not _exact_in(mask, _dtype(q)):
        q, k, v = upcast  # a float32 mask the half-precision attention would round: attention runs in float32
    q_shape, k_shape, v_shape = (_shape(n) for n in (q, k, v))
    if q_shape is None or k_shape is None or v_shape is None or not _compatible(q_shape, k_shape, v_shape):
        return None
    dtype = _dtype(q)
    if dtype is None or not dtype.is_floating_point or {_dtype(k), _dtype(v)} != {dtype}:
        return None
    if mask is not None and not _mask_fits(mask, q_shape, k_shape, _dtype(scores)):
        return None
    if mask is not None and _all_zero(mask):
        mask = None  # a mask that masks nothing (transformers' all-true mask under torch.compile): the kernels
        # without a mask are the fast ones (flash, cuDNN)
    return Attention(q, k, v, scale * q_scale * k_scale, mask, safe)


def _without_upcast(product: torch.fx.Node, q: torch.fx.Node, k: torch.fx.Node,
                    v: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """q, k and v before a float32 conversion of all three from one half-precision dtype, where the result is
    converted back to it (PyTorch's math attention on half-precision inputs): the fused kernels take them as they
    are and accumulate in float32. A float32 result the caller keeps keeps the float32 copies."""
    if not all(_is_cast(n) and _dtype(n) == torch.float32 for n in (q, k, v)):
        return q, k, v
    sources: list[torch.fx.Node] = [_args(n)[0] for n in (q, k, v)]
    dtypes = {_dtype(n) for n in sources}
    if dtypes not in ({torch.float16}, {torch.bfloat16}):
        return q, k, v
    readers = _users(product)
    viewed = _users(readers[0]) if len(readers) == 1 and readers[0].target in _VIEWS else []
    back = len(viewed) == 1 and _is_cast(viewed[0]) and _dtype(viewed[0]) in dtypes
    return tuple(sources) if back else (q, k, v)


def _args(node: torch.fx.Node) -> tuple[Any, ...]:
    return tuple(node.args)


def _users(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read `node` and are themselves read (a value nothing reads is dead code of the trace)."""
    return [u for u in node.users if u.op == "output" or u.users]


def _sole(node: torch.fx.Node) -> bool:
    return len(_users(node)) == 1


def _meta(node: torch.fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("tensor_meta"))


def _shape(node: torch.fx.Node) -> tuple[int, ...] | None:
    value = _meta(node)
    shape = getattr(value, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _dtype(node: torch.fx.Node) -> torch.dtype | None:
    return getattr(_meta(node), "dtype", None)


def _batched(operand: Any) -> torch.fx.Node | None:
    """The 4-D value a product's [B * H, ...] operand views: view(expand(x, x's own shape), [B * H, ...])."""
    if not (isinstance(operand, torch.fx.Node) and operand.target in _VIEWS and _sole(operand)):
        return None
    source = _without_clone(_args(operand)[0])
    if isinstance(source, torch.fx.Node) and source.target is aten.expand.default and _sole(source):
        if tuple(_args(source)[1]) != _shape(_args(source)[0]):
            return None  # a real broadcast (grouped heads): not matched
        source = _without_clone(_args(source)[0])
    shape, viewed = _shape(source), _shape(operand)
    if shape is None or viewed is None or len(shape) != 4 or viewed != (shape[0] * shape[1], shape[2], shape[3]):
        return None
    return source


def _softmax_input(probabilities: torch.fx.Node) -> tuple[torch.fx.Node, int, bool] | None:
    """The scores a softmax over the last dim turns into `probabilities`, how many nodes of the softmax read them,
    and whether it is a safe softmax (zeros for a row of -inf): `_safe_softmax`, or its decomposition
    `where(all(scores == -inf, -1), zeros_like(p), p)` with p = _softmax(scores)."""
    node = _without_clone(probabilities)  # dropout in eval mode traces to a clone
    if _is_cast(node):
        node = _args(node)[0]
    condition = None
    if node.target is aten.where.self and _sole(node):
        condition, zeros, node = _args(node)
        if not (isinstance(zeros, torch.fx.Node) and zeros.target is aten.zeros_like.default and _sole(zeros)
                and isinstance(node, torch.fx.Node) and _args(zeros)[0] is node and len(_users(node)) == 2):
            return None
    elif not _sole(node):
        return None
    if node.target not in _SOFTMAX or _args(node)[1] not in (-1, 3):
        return None
    scores = _args(node)[0]
    if condition is not None:
        return (scores, 2, True) if _all_minus_infinity(condition, scores) else None
    if _is_cast(scores) and _dtype(scores) == torch.float32:
        scores = _args(scores)[0]
    return scores, 1, node.target is not aten._softmax.default


def _all_minus_infinity(condition: Any, scores: torch.fx.Node) -> bool:
    """`all(scores == -inf, -1, keepdim=True)`, read by nothing else."""
    if not (isinstance(condition, torch.fx.Node) and condition.target is aten.all.dim and _sole(condition)):
        return False
    equal = _args(condition)[0]
    return (_args(condition)[1:] in ((-1, True), (3, True)) and isinstance(equal, torch.fx.Node)
            and equal.target is aten.eq.Scalar and _sole(equal) and _args(equal) == (scores, float("-inf")))


def _without_clone(value: Any) -> Any:
    """The value a copy reads (`clone`, into any memory format), where nothing else reads the copy."""
    if isinstance(value, torch.fx.Node) and value.target is aten.clone.default and _sole(value):
        return _args(value)[0]
    return value


def _is_cast(node: torch.fx.Node) -> bool:
    """A dtype conversion alone (no device, layout or memory format change), read by nothing else."""
    if not (node.target is aten._to_copy.default and _sole(node) and set(node.kwargs) <= {"dtype", "layout", "device"}):
        return False
    source = getattr(_meta(_args(node)[0]), "device", None)
    return node.kwargs.get("layout", torch.strided) == torch.strided and node.kwargs.get("device", source) == source


def _without_mask(scores: torch.fx.Node, readers: int) -> tuple[torch.fx.Node, torch.fx.Node | None]:
    """The scores before an additive mask, and the mask; `readers` nodes of the softmax read the masked scores."""
    if (scores.target is aten.add.Tensor and len(_users(scores)) == readers and len(_args(scores)) == 2
            and not scores.kwargs):
        base, mask = _args(scores)
        if isinstance(base, torch.fx.Node) and isinstance(mask, torch.fx.Node) and _shape(mask) is not None:
            return base, mask
    return scores, None


def _without_scale(value: torch.fx.Node, sole: bool = True) -> tuple[torch.fx.Node | None, float]:
    """`value` without a multiplication or division by a Python number, and the factor it applied."""
    if value.target in _SCALINGS and (not sole or _sole(value)) and not value.kwargs:
        base, number = _args(value)
        if isinstance(base, torch.fx.Node) and isinstance(number, (int, float)) and not isinstance(number, bool):
            if value.target in (aten.div.Tensor, aten.div.Scalar):
                return (base, 1.0 / number) if number else (None, 1.0)
            return base, float(number)
    return value, 1.0


def _untransposed(value: torch.fx.Node) -> torch.fx.Node | None:
    """k from k.transpose(-2, -1) (or a permute swapping the last two dims)."""
    if value.target is aten.transpose.int and _sole(value):
        dims = {d % 4 for d in _args(value)[1:3]}
        return _args(value)[0] if dims == {2, 3} else None
    if value.target is aten.permute.default and _sole(value) and tuple(_args(value)[1]) in ((0, 1, 3, 2),):
        return _args(value)[0]
    return None


def _mask_fits(mask: torch.fx.Node, q: tuple[int, ...], k: tuple[int, ...], dtype: torch.dtype | None) -> bool:
    """An additive floating-point mask that broadcasts to [B, H, T, S] and whose addition keeps the scores' dtype
    (a half-precision mask added to float32 scores, as PyTorch's math attention does, is converted exactly)."""
    shape, own = _shape(mask), _dtype(mask)
    if shape is None or own is None or dtype is None or not own.is_floating_point or len(shape) > 4:
        return False
    if torch.promote_types(own, dtype) != dtype:
        return False
    full = (q[0], q[1], q[2], k[2])
    return all(d in (1, f) for d, f in zip((1,) * (4 - len(shape)) + shape, full))


def _exact_in(mask: torch.fx.Node, dtype: torch.dtype | None) -> bool:
    """Whether every value of `mask` is exact in `dtype`: a mask of a dtype whose every value is (`_exact_dtype`), a
    conversion of one, or a `where` choosing between numbers exact in it (a boolean mask made additive: 0, -inf)."""
    own = _dtype(mask)
    if dtype is None or own is None:
        return False
    if _exact_dtype(own, dtype):
        return True
    if mask.target is aten._to_copy.default:
        source = _args(mask)[0]
        return isinstance(source, torch.fx.Node) and _exact_in(source, dtype)
    if mask.target in _WHERES:
        return all(_exact_number(value, dtype) for value in _args(mask)[1:3])
    return False


def _exact_dtype(own: torch.dtype, dtype: torch.dtype) -> bool:
    """Whether every value of dtype `own` converts to `dtype` unchanged: the same dtype, bool and 8-bit integers
    (|x| <= 255: exact in every float dtype, bf16's 8-bit significand included), or a narrower float of the same
    kind (half precision in float32 or float64). Not wider integers: 1001 is 1000 in bf16."""
    if own == dtype or own in (torch.bool, torch.int8, torch.uint8):
        return True
    if own.is_floating_point and dtype.is_floating_point:
        return dtype in (torch.float32, torch.float64) and torch.finfo(own).bits < torch.finfo(dtype).bits
    return False


def _exact_number(value: Any, dtype: torch.dtype) -> bool:
    """A number (or a 0-d tensor made of one) that converts to `dtype` unchanged."""
    if isinstance(value, torch.fx.Node):
        if value.target in (aten.scalar_tensor.default, aten.full.default) and _shape(value) in ((), None):
            value = _args(value)[-1]
        else:
            return _exact_in(value, dtype) if _shape(value) == () else False
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value != value or float(torch.tensor(float(value), dtype=dtype).item()) == float(value)


_MAX_FOLDED = 1 << 24  # elements: a mask is evaluated at capture only if it is no larger


def _all_zero(mask: torch.fx.Node) -> bool:
    """Whether `mask` reads no input and is zero everywhere: computed now from sizes alone (aranges, comparisons,
    `where` of constants, expands), as it will be at every call of a program built for these sizes."""
    try:
        value = evaluate(mask, {}, _aten_step)
    except NotConstant:
        return False
    return isinstance(value, torch.Tensor) and not bool(value.any())


def _aten_step(node: torch.fx.Node) -> Any:
    """What an aten graph's node runs when its value is folded: a pure, deterministic aten op of a small tensor with
    static sizes."""
    target, meta = node.target, _meta(node)
    if (node.op != "call_function" or not isinstance(target, torch._ops.OpOverload)
            or target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags
            or not isinstance(meta, torch.Tensor) or meta.numel() > _MAX_FOLDED
            or any(isinstance(d, torch.SymInt) for d in meta.shape)):
        raise NotConstant
    return target


def _compatible(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> bool:
    """[B, H, T, D] q, [B, H, S, D] k, [B, H, S, Dv] v."""
    return len(q) == len(k) == len(v) == 4 and q[:2] == k[:2] == v[:2] and q[3] == k[3] and k[2] == v[2]
