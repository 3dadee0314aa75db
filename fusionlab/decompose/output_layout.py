"""Outputs with the strides eager gives them: the last step of decomposing every graph (decompose/apply.py).

Eager returns a pointwise op of a channels-last or transposed input in its input's dimension order (`x * 2` of a
channels-last `x`, `(x.t() + 1).t()`), where a kernel would write row-major. So an output a kernel computes, or the
value a returned view chain starts at, gets the strides eager gives it: the kernel stores a copy of it in eager's
dimension order (`layout.stored_permuted`: a permuted copy fusion takes into the kernel) and the output reads that
copy's view, so `.view` on it behaves as in eager. The values are the same either way.

    >>> graph = eager_output_strides(graph, strides)  # strides: eager's, one per output (None where unknown)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fusionlab.decompose.layout import stored_permuted, swapped
from fusionlab.ir import Graph, Node, unique_names


def eager_output_strides(graph: Graph, strides: Sequence[tuple[int, ...] | None],
                         traced: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """`graph` with what the caller gets laid out as eager lays it out: a pointwise op of a channels-last or
    transposed input follows its input's order in eager, where a kernel would write row-major. An output a kernel
    computes (`strides[i]` for output i), or the value a returned view chain starts at (`traced`: eager's strides of
    the values aten ops computed), is stored in eager's order as a copy (`stored_permuted`) whose view the output, or
    the chain's first view, reads; the kernel's other readers keep reading the value itself."""
    traced = traced or {}
    orders: dict[str, tuple[int, ...]] = {}  # a kernel's value -> the order eager stores it in
    chains: dict[str, str] = {}  # the first view of a returned chain -> the kernel value it reads
    for name, wanted in zip(graph.outputs, strides, strict=True):
        node, first = graph[name], None
        while node.kind == "view" and node.op != "output_of" and node.inputs:
            first, node = node, graph[node.inputs[0]]
            wanted = traced.get(node.name)
        order = dense_order(node.type.shape, wanted) if node.kind in ("pointwise", "reduction") else None
        if order is None or order == tuple(range(len(order))):
            continue
        orders[node.name] = order
        if first is not None:
            chains[first.name] = node.name
    if not orders:
        return graph
    unique = unique_names(n.name for n in graph.nodes)
    nodes: list[Node] = []
    views: dict[str, str] = {}
    for node in graph.nodes:
        nodes.append(swapped(node, {chains[node.name]: views[chains[node.name]]}) if node.name in chains else node)
        if node.name in orders:
            made = stored_permuted(node, orders[node.name], unique, ("reordered", "eager_layout", "as_eager"))
            nodes.extend(made)
            views[node.name] = made[2].name
    outputs = tuple(views.get(n, n) if graph[n].kind in ("pointwise", "reduction") else n for n in graph.outputs)
    return Graph(graph.inputs, tuple(nodes), outputs, graph.hints)


def dense_order(shape: tuple[Any, ...], strides: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The dimension order (outermost first) in which `strides` lay a dense `shape` out, or None when they do not
    (overlapping, gaps, symbolic sizes), or when they are row-major but for dims of size 1."""
    if strides is None or len(strides) != len(shape) or not all(isinstance(d, int) for d in (*shape, *strides)):
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d] if shape[d] != 1 else 0, d)))
    order = tuple(d for d in order if shape[d] != 1) + tuple(d for d in range(len(shape)) if shape[d] == 1)
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != expected:
            return None
        expected *= shape[d]
    if [d for d in order if shape[d] != 1] == [d for d in range(len(shape)) if shape[d] != 1]:
        return None  # row-major where it counts
    return order
