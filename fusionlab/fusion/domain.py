"""The iteration domain of a fusion group: the one shape its kernel walks, and the axes it reduces.

A set of nodes can become one kernel only if every value it stores lines up with one domain: the full shape
(pointwise and prologue/epilogue values) or the domain with the reduced axes removed (reduction results).
`analyse` returns that `Domain`, or a plain-words reason why there is none; the code generator uses the same
`Domain` to lay out its loops, so what fusion accepts, codegen can emit.

    >>> analyse(graph, ("amax", "sub", "exp", "sum", "div"), outputs=("div",))
    Domain(shape=(8, 16), axes=(1,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusionlab.ir import Dim, Graph, Node
from fusionlab.primitives import INDEX_VIEWS


@dataclass(frozen=True)
class Domain:
    shape: tuple[Dim, ...]
    axes: tuple[int, ...]

    @property
    def is_reduction(self) -> bool:
        return bool(self.axes)

    @property
    def outer(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.shape)) if i not in self.axes)


def non_unit(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    return tuple(d for d in shape if d != 1)


def is_unit_reshape(node: Node, graph: Graph) -> bool:
    """A reshape that only adds or drops size-1 dimensions keeps the element order."""
    source = graph[node.inputs[0]].type.shape
    return non_unit(source) == non_unit(node.type.shape)


def view_blocker(node: Node, graph: Graph) -> str | None:
    """Why this view cannot live inside a kernel (None if it can: an index-only view)."""
    if node.op not in INDEX_VIEWS:
        return (f"{node.name} is a {node.op} view: it reorders or selects elements, so its input is written "
                "to memory and read back through a strided view")
    if node.op == "reshape" and not is_unit_reshape(node, graph):
        return (f"{node.name} reshapes {graph[node.inputs[0]].type.text()} to {node.type.text()}: a kernel "
                "would need a second index space, so the reshape runs as a view between kernels")
    return None


def alignment(shape: Sequence[Dim], domain: Domain) -> str | None:
    """'full', 'row' (the domain without its reduced axes), or None when `shape` fits neither."""
    if non_unit(shape) == non_unit(domain.shape):
        return "full"
    if domain.is_reduction and non_unit(shape) == non_unit([domain.shape[i] for i in domain.outer]):
        return "row"
    return None


def analyse(graph: Graph, names: Sequence[str], outputs: Sequence[str]) -> Domain | str:
    """The domain of the kernel made of `names` that stores `outputs`, or the reason it cannot exist."""
    nodes = [graph[n] for n in names]
    for node in nodes:
        if node.kind == "extern":
            return f"{node.name} is an extern op ({node.op}): it runs as an eager PyTorch call between kernels"
        if node.kind == "view":
            blocker = view_blocker(node, graph)
            if blocker:
                return blocker
    matmuls = [n for n in nodes if n.kind == "matmul"]
    if matmuls:
        return _matmul_domain(graph, nodes, outputs, matmuls)
    reductions = [n for n in nodes if n.kind == "reduction"]
    if reductions:
        first = reductions[0]
        shape = graph[first.inputs[0]].type.shape
        axes = tuple(first.param("axes"))
        for other in reductions[1:]:
            other_shape = graph[other.inputs[0]].type.shape
            if tuple(other.param("axes")) != axes:
                return (f"{other.name} reduces over axes {tuple(other.param('axes'))} but {first.name} over {axes}: "
                        "one kernel walks one reduction axis")
            if tuple(other_shape) != tuple(shape):
                return (f"{other.name} reduces a {tuple(other_shape)} tensor and {first.name} a {tuple(shape)} "
                        "one: one kernel walks one iteration space")
        domain = Domain(tuple(shape), axes)
    else:
        stored = [graph[n] for n in outputs] or nodes
        widest = max(stored, key=lambda n: (len(non_unit(n.type.shape)), str(n.type.numel)))
        domain = Domain(tuple(widest.type.shape), ())
    for name in outputs:
        node = graph[name]
        if alignment(node.type.shape, domain) is None:
            return (f"{node.name} ({node.type.text()}) would be written by a kernel that walks "
                    f"{tuple(domain.shape)}: one kernel writes values of one shape (or its reduced rows)")
    for node in nodes:
        if node.kind in ("pointwise", "reduction") and alignment(node.type.shape, domain) is None \
                and not _reaches_through_expand(node, set(names), graph):
            return f"{node.name} ({node.type.text()}) does not line up with the kernel's shape {tuple(domain.shape)}"
    return domain


def _matmul_domain(graph: Graph, nodes: Sequence[Node], outputs: Sequence[str],
                   matmuls: Sequence[Node]) -> Domain | str:
    """A matmul kernel walks the product's [M, N] output in tiles; everything else in it is an epilogue on the
    accumulator tile: pointwise values over [M, N] (or broadcast into it)."""
    first = matmuls[0]
    if len(matmuls) > 1:
        return (f"{matmuls[1].name} and {first.name} are both matmuls: one matmul per kernel (a product that reads "
                "another needs its whole output)")
    names = {n.name for n in nodes}
    for operand in first.inputs:
        if operand in names:
            return (f"{operand} feeds the matmul {first.name} as an operand: prologues into a matmul's inputs are not "
                    "fused (the matmul loads its operands tile by tile from memory)")
    for node in nodes:
        if node.kind == "reduction":
            return (f"{node.name} reduces the output of the matmul {first.name}: its rows span the tiles of several "
                    "programs, so it runs as a kernel of its own")
    domain = Domain(tuple(first.type.shape), ())
    for name in outputs:
        node = graph[name]
        if tuple(node.type.shape) != domain.shape:
            return (f"{node.name} ({node.type.text()}) would be written by a matmul kernel whose output is "
                    f"{tuple(domain.shape)}: an epilogue writes values of the product's shape")
    group = set(names)
    for node in nodes:
        if node.kind == "pointwise" and tuple(node.type.shape) != domain.shape \
                and not _reaches_through_expand(node, group, graph):
            return (f"{node.name} ({node.type.text()}) does not line up with the matmul's output "
                    f"{tuple(domain.shape)}")
    return domain


def _reaches_through_expand(node: Node, group: set[str], graph: Graph) -> bool:
    """A smaller value inside a group is fine when it only feeds broadcasts (computed per element)."""
    users = [n for n in graph.nodes if node.name in n.inputs and n.name in group]
    return bool(users) and all(u.op in ("expand", "reshape") or u.kind == "pointwise" for u in users)
