"""Copy rules: dtype conversions (`_to_copy`), copies (`clone`) and writes of one tensor's values into another's
shape (`copy`), which become the `copy` primitive; a copy of a product's transposed operand keeps its own order.

    >>> aten.clone in COPY_RULES
    True
"""

from __future__ import annotations

from typing import Any

import torch

from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable
from fusionlab.ir import Ref

aten = torch.ops.aten


def _to_copy(b: Builder, x: Ref, dtype: torch.dtype | None = None, **kwargs: Any) -> Ref:
    """A dtype conversion. A `device=` naming the device the tensor is already on (AOTAutograd and PyTorch's
    decompositions spell it out: `_to_copy(mask, dtype=torch.bool, device=cpu)`) is still a copy in a kernel; a
    copy to another device runs in PyTorch."""
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "meta" and not _same_device(b, torch.device(device)):
        raise RuleNotApplicable(f"a copy to another device ({device})")
    return b.pointwise("copy", b.cast(x, dtype or b.type_of(x).dtype))


def _same_device(b: Builder, device: torch.device) -> bool:
    """Whether the tensor `b.node` copies already lives on `device` (cuda and cuda:0 are one device here)."""
    source = b.node.args[0] if b.node is not None and b.node.args else None
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return False
    here = value.device
    return here.type == device.type and (device.index is None or here.index in (None, device.index))


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


def _copy(b: Builder, x: Ref, src: Any, non_blocking: bool = False) -> Ref:
    """`aten.copy(x, src)`, the functional form of `x.copy_(src)` (a write through a view is one): src broadcast to
    x's shape in x's dtype. x's values are not read."""
    shape = tuple(b.type_of(x).shape)
    dtype = b.type_of(x).dtype
    if not isinstance(src, Ref):
        return b.fill(shape, src, dtype)
    return b.pointwise("copy", b.broadcast(b.cast(src, dtype), shape))


COPY_RULES: dict[Any, Rule] = {
    aten.copy: _copy,
    aten._to_copy: _to_copy,
    aten.clone: _clone,
    aten.lift_fresh_copy: lambda b, x: b.pointwise("copy", x),
}
