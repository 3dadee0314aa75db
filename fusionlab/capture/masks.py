"""Attention masks that mask nothing, dropped from a Dynamo graph before it is differentiated.

Under torch.compile, transformers cannot look at a padding mask's values, so it builds one in full from positions
(`arange(n) >= 0`, expanded to [B, 1, T, S]: everything kept) and passes it to `scaled_dot_product_attention`. A mask
makes PyTorch leave its fast fused kernels for the math attention, in the forward and in the backward. Such a mask
depends on sizes alone: it is computed here, once, at the sizes the graph was traced for, and where it keeps every
position (a boolean mask all True, an additive mask all zero) the call goes without it. Anything that reads an input,
a parameter or a buffer, or an op outside a short list of deterministic ones, is left alone.

    >>> dropped = drop_empty_masks(graph_module)       # the names of the attention calls that lost their mask
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from fusionlab.capture.constants import NotConstant, evaluate

__all__ = ["drop_empty_masks"]

_MAX_ELEMENTS = 1 << 24  # a mask is evaluated only if it is no larger

_FUNCTIONS = {
    torch.arange, torch.ones, torch.zeros, torch.full, torch.where, torch.tril, torch.triu, torch.ge, torch.gt,
    torch.le, torch.lt, torch.eq, torch.ne, torch.logical_and, torch.logical_or, torch.logical_not, torch.add,
    torch.sub, torch.mul, operator.getitem, operator.ge, operator.gt, operator.le, operator.lt, operator.eq,
    operator.ne, operator.and_, operator.or_, operator.invert, operator.add, operator.sub, operator.mul,
    operator.neg,
}
_METHODS = {
    "expand", "unsqueeze", "view", "reshape", "to", "bool", "float", "half", "bfloat16", "int", "long",
    "logical_not", "logical_and", "logical_or", "masked_fill", "eq", "ne", "ge", "gt", "le", "lt", "add", "sub",
    "mul", "__getitem__", "contiguous", "clone", "tril", "triu",
}


_OPERATORS_IN_PLACE = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                       operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift,
                       operator.irshift, operator.imatmul}


_ALIASING_FUNCTIONS = {
    operator.getitem, getattr, torch.reshape, torch.permute, torch.transpose, torch.t, torch.unsqueeze, torch.squeeze,
    torch.select, torch.narrow, torch.as_strided, torch.detach, torch.flatten, torch.movedim, torch.split,
    torch.chunk, torch.unbind, torch.diagonal, torch.swapaxes, torch.broadcast_to,
}
_ALIASING_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "select", "narrow", "as_strided", "detach", "contiguous", "to", "float", "half", "bfloat16", "bool",
    "int", "long", "type", "type_as", "flatten", "unflatten", "unfold", "diagonal", "movedim", "swapaxes",
    "__getitem__", "split", "chunk", "unbind", "broadcast_to",
}


def drop_empty_masks(graph_module: torch.fx.GraphModule) -> list[str]:
    """Remove, in place, the `attn_mask` of every `scaled_dot_product_attention` call whose mask depends on sizes
    alone and keeps every position; returns the names of those calls. The mask's own nodes stay (a Dynamo graph is
    not functional: nothing else is removed with them)."""
    dropped = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target is not F.scaled_dot_product_attention:
            continue
        positional = len(node.args) > 3
        mask = node.args[3] if positional else node.kwargs.get("attn_mask")
        if isinstance(mask, torch.fx.Node) and _keeps_everything(mask, node):
            if positional:
                node.update_arg(3, None)
            else:
                node.update_kwarg("attn_mask", None)
            dropped.append(node.name)
    if dropped:
        graph_module.recompile()
    return dropped


def _keeps_everything(mask: torch.fx.Node, attention: torch.fx.Node) -> bool:
    memo: dict[torch.fx.Node, Any] = {}
    try:
        value = evaluate(mask, memo, _dynamo_step)
    except NotConstant:
        return False
    except Exception:  # noqa: BLE001 - an op that does not run on these values: the mask stays
        return False
    if _written_in_place(set(memo), attention):
        return False  # `mask[...] = -inf`, `mask.masked_fill_(...)`: its producers alone do not say its value
    if not isinstance(value, torch.Tensor):
        return False
    return bool(value.all()) if value.dtype == torch.bool else bool((value == 0).all())


def _written_in_place(cone: set[torch.fx.Node], attention: torch.fx.Node) -> bool:
    """Whether the mask's nodes, or a view of one, are written in place by any node other than the attention call:
    an in-place method or op (by name or by its schema), `out=`, `inplace=True`, an item assignment, or anything
    that is not known not to write (a module call, a higher-order op such as a checkpointed body)."""
    seen, todo = set(cone), list(cone)
    while todo:
        node = todo.pop()
        for user in node.users:
            if user is attention or user in seen:
                continue
            if _mutates(user):
                return True
            if _aliases(user):  # a view of the mask: what writes it writes the mask
                seen.add(user)
                todo.append(user)
    return False


def _name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _aliases(node: torch.fx.Node) -> bool:
    """Whether `node` may return a view of an argument: a view method or function (`torch.Tensor.view` too), or an
    op whose schema returns an alias (`aten.slice.Tensor`)."""
    if node.op == "call_method":
        return node.target in _ALIASING_METHODS
    if node.op != "call_function":
        return False
    if node.target in _ALIASING_FUNCTIONS or _name(node).split(".")[0] in _ALIASING_METHODS:
        return True
    return any(r.alias_info is not None for schema in _schemas(node.target) for r in schema.returns)


def _schemas(target: Any) -> list[Any]:
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, overload)._schema for overload in target.overloads()]
    if isinstance(target, torch._ops.OpOverload):
        return [target._schema]
    return []


def _mutates(node: torch.fx.Node) -> bool:
    target, name = node.target, _name(node)
    if node.op == "call_module" or isinstance(target, torch._ops.HigherOrderOperator):
        return True  # not known not to write its arguments
    if target is operator.setitem or target in _OPERATORS_IN_PLACE or "out" in node.kwargs:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    if any(a.alias_info is not None and a.alias_info.is_write for schema in _schemas(target) for a in schema.arguments):
        return True  # aten's and custom ops' in-place overloads (`fill_.Scalar`, `mutates_args=`)
    base = name.split(".")[0]
    return (base.endswith("_") and not base.endswith("__")) or (base.startswith("__i") and base.endswith("__"))


def _dynamo_step(node: torch.fx.Node) -> Any:
    """What a Dynamo graph's node runs when its value is computed at capture: a torch function or tensor method of
    the allow-list, on a tensor of known, small size."""
    example = node.meta.get("example_value")
    if isinstance(example, torch.Tensor):
        numel = example.numel()
        if not isinstance(numel, int) or numel > _MAX_ELEMENTS:
            raise NotConstant
    if node.op == "call_function" and node.target in _FUNCTIONS:
        return node.target
    if node.op == "call_method" and node.target in _METHODS:
        name = node.target

        def method(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(tensor, torch.Tensor):
                raise NotConstant
            return getattr(tensor, name)(*args, **kwargs)
        return method
    raise NotConstant
