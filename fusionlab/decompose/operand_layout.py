"""Attention operands laid out as traced: a layout step of decomposing a graph (decompose/apply.py).

PyTorch's fused attention gives its result the dimension order of its query (cuDNN's: `alloc_with_matching_layout`),
and its backward reads the output and the output's gradient in their traced orders. Eager's rotary embedding returns
the query in the order of the projection's view, `q_proj(x).view(B, S, H, D).transpose(1, 2)`: [B, H, S, D] laid out
as [B, S, H, D], so the attention's result goes back to [B, S, H * D] by `transpose(1, 2).reshape` without a copy.
A kernel writes its values row-major: the query would reach the attention as [B, H, S, D] row-major, the result come
back so, and the reshape after it copy (one ATen copy per layer of Llama's forward). So an attention operand that a
kernel computes, traced in another dense order, is stored by that kernel in the traced order too (as a copy fusion
takes into the kernel: `layout.stored_permuted`), as Inductor's `sdpa_constraint` keeps each operand's traced stride
order; the attention reads that copy's view, and so does a training step's saved activation of the same value (the
backward graph was traced for eager's layout, and reads it beside the attention's output).

    >>> graph = attention_operands_as_traced(graph, graph_module, saved_from)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from fusionlab.capture import strides_of
from fusionlab.decompose.layout import stored_permuted, swapped
from fusionlab.decompose.output_layout import dense_order
from fusionlab.ir import Graph, Node, Ref, unique_names

_aten = torch.ops.aten
#: The fused attention ops (forward and backward) whose results follow their operands' layout.
ATTENTION_OPS = frozenset(getattr(_aten, name) for name in (
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_fused_attention_overrideable_backward",
    "scaled_dot_product_attention") if hasattr(_aten, name))


def attention_operands_as_traced(graph: Graph, graph_module: torch.fx.GraphModule,
                                 saved_from: int | None = None) -> Graph:
    """`graph` with each kernel-computed operand of a fused attention extern stored in the dense order it was traced
    in, where that is not row-major; the attention, and the outputs from `saved_from` on (saved activations) that
    are the value itself, read the stored copy's view. The values are the same either way."""
    fx_nodes = {node.name: node for node in graph_module.graph.nodes}
    orders: dict[str, tuple[int, ...]] = {}  # a kernel's value -> the order it was traced in
    readers: set[str] = set()  # the attention externs reading one of them
    for node in graph.nodes:
        if node.kind != "extern" or _packet(node.param("target")) not in ATTENTION_OPS:
            continue
        for ref, traced in _operands(node, fx_nodes.get(node.origin)):
            producer = graph[ref.name]
            if producer.kind not in ("pointwise", "reduction"):
                continue  # an input or an extern result reaches the attention as it is, in eager's order already
            val = traced.meta.get("val")
            if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(producer.type.shape):
                continue
            order = dense_order(producer.type.shape, strides_of(val))
            if order is not None:
                orders.setdefault(ref.name, order)
                readers.add(node.name)
    if not orders:
        return graph
    unique = unique_names(n.name for n in graph.nodes)
    views: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.name in readers:
            node = swapped(node, {v: views[v] for v in node.inputs if v in views})
        nodes.append(node)
        if node.name in orders:
            made = stored_permuted(node, orders[node.name], unique, ("reordered", "traced_layout", "as_traced"))
            nodes.extend(made)
            views[node.name] = made[2].name
    outputs = tuple(views.get(name, name) if saved_from is not None and position >= saved_from else name
                    for position, name in enumerate(graph.outputs))
    return Graph(graph.inputs, tuple(nodes), outputs, graph.hints)


def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", target)


def _operands(node: Node, fx_node: torch.fx.Node | None) -> list[tuple[Ref, torch.fx.Node]]:
    """The extern's tensor operands beside the traced nodes they stand for (none where the two calls do not line
    up argument for argument)."""
    if fx_node is None or _packet(fx_node.target) != _packet(node.param("target")):
        return []  # (an attention matched in products stands for its last product: decompose/attention.py)
    ours = pytree.tree_leaves(node.param("call"), is_leaf=lambda v: isinstance(v, Ref))
    theirs = pytree.tree_leaves((fx_node.args, fx_node.kwargs))
    if len(ours) != len(theirs):
        return []
    return [(ref, traced) for ref, traced in zip(ours, theirs, strict=True)
            if isinstance(ref, Ref) and isinstance(traced, torch.fx.Node)]
