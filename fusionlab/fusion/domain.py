"""The iteration domain of a fusion group: the one shape its kernel walks, and the axes it reduces.

A set of nodes can become one kernel only if every value it stores lines up with one domain: the full shape
(pointwise and prologue/epilogue values) or the domain with the reduced axes removed (reduction results).
`analyse` returns that `Domain`, or a plain-words reason why there is none; the code generator uses the same
`Domain` to lay out its loops, so what fusion accepts, codegen can emit. `pair_blocker` states the same rules for
two whole groups (an extern op, a matmul's operands, a second matmul, a reduction over a product), in the words a
policy's verdict gives; policies ask it rather than repeat it.

    >>> analyse(graph, ("amax", "sub", "exp", "sum", "div"), outputs=("div",))
    Domain(shape=(8, 16), axes=(1,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fusionlab.decompose import INDEX_VIEWS
from fusionlab.fusion.kinds import group_kind
from fusionlab.ir import Dim, Graph, Node, Ref

# For each dimension of a value: the domain dimension it follows, or None (a broadcast). Code generation adds its
# own entries (a concatenation slice); `view_map` carries any entry through unchanged.
IndexMap = tuple[Any, ...]


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
        return (f"{node.name} is a {node.op} view: it selects part of its input, so its input is written to "
                "memory and read back through a strided view")
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


def value_map(shape: Sequence[Dim], domain: Domain, level: str) -> IndexMap:
    """Align a stored or loaded shape with the domain ("full") or its outer dimensions ("row"), in order."""
    targets = list(range(len(domain.shape))) if level == "full" else list(domain.outer)
    targets = [t for t in targets if domain.shape[t] != 1]
    return tuple(None if size == 1 else targets.pop(0) for size in shape)


def store_map(node: Node, domain: Domain, graph: Graph | None = None) -> IndexMap:
    """The index map a kernel stores `node` at: its own row for a reduced value, every dimension otherwise, or (with
    `graph`) the permuted dimensions of a `permuted_store`."""
    permuted = permuted_store(graph, node, domain) if graph is not None else None
    if permuted is not None:
        return permuted
    return value_map(node.type.shape, domain, alignment(node.type.shape, domain) or "full")


def permuted_store(graph: Graph, node: Node, domain: Domain) -> IndexMap | None:
    """The index map of `copy(permute(v, dims))` stored by a kernel that computes `v` over its whole domain: `v`
    written in another dimension order (a batch norm's gradient stored channels-last for the convolution that reads
    it: decompose/layout.py), dimension j of the copy following v's dimension dims[j]. None for any other value, and
    where `v` does not line up with the domain (a pointwise kernel storing only the copy walks the copy's shape)."""
    if not permuted_copy(graph, node):
        return None
    view = graph[node.inputs[0]]
    source = graph[view.inputs[0]].type.shape
    if alignment(source, domain) != "full" or len(source) != len(domain.shape):
        return None
    moved = [int(d) for d in view.param("dims") if source[int(d)] != 1]
    if moved == sorted(moved):
        return None  # the elements' order is v's own (only size-1 dimensions move): a plain store
    source_map = value_map(source, domain, "full")
    return tuple(source_map[int(d)] for d in view.param("dims"))


def permuted_copy(graph: Graph, node: Node) -> bool:
    """`copy(permute(v))`: v stored in another dimension order."""
    if node.kind != "pointwise" or node.op != "copy" or len(node.inputs) != 1:
        return False
    view = graph[node.inputs[0]]
    return view.kind == "view" and view.op == "permute"


def view_map(graph: Graph, node: Node, index_map: IndexMap) -> IndexMap:
    """The index map of an index-only view's input, given the map the view is read at."""
    source = graph[node.inputs[0]].type.shape
    if node.op == "expand":
        return tuple(m if source[i] == node.type.shape[i] else None for i, m in enumerate(index_map))
    if node.op == "permute":  # the view's dim j is the source's dim dims[j]
        source_map: list[Any] = [None] * len(source)
        for j, dim in enumerate(node.param("dims")):
            source_map[int(dim)] = index_map[j]
        return tuple(source_map)
    # A size-1 reshape: carry the non-unit dimensions across in order.
    carried = [m for m, size in zip(index_map, node.type.shape) if size != 1]
    return tuple(None if size == 1 else carried.pop(0) for size in source)


def view_source(graph: Graph, value: str) -> str:
    """The value an index-only view chain (expand, size-1 reshape, permute) reads: the tensor whose elements it
    shows."""
    node = graph[value]
    while node.kind == "view" and node.op in INDEX_VIEWS:
        node = graph[node.inputs[0]]
    return node.name


@dataclass(frozen=True)
class _Slice:
    """A concatenation input's entry: the domain index shifted into one slice (never a reduction's own row)."""

    dim: Any
    part: int | str  # the input's position in a concatenation, or the op that moves the index (pad, roll)


def reads_own_row(reduction: Node, index_map: IndexMap, domain: Domain) -> bool:
    """Whether a reduction result read at `index_map` is read at the row it was reduced into.

    A kernel holds a reduction result for its own rows only ([XBLOCK, 1] in registers); a consumer that reads it
    along another axis (`a / a.sum(1)` on a square `a`: the sum broadcast along dim 0, indexed by column) would
    get another row's value. Size-1 dimensions (keepdim) read the same element whatever the index."""
    own = value_map(reduction.type.shape, domain, "row")
    return all(size == 1 or entry == expected
               for size, entry, expected in zip(reduction.type.shape, index_map, own))


def misread(graph: Graph, names: Sequence[str], outputs: Sequence[str], domain: Domain,
            permuted: bool = True) -> str | None:
    """Why the kernel over `names` would index one of its values wrongly (None if it would not). Walks the index
    maps as codegen emits them: from each stored value and each reduction's source, through views, pointwise ops and
    concatenations. Each value the kernel computes must be read at a map of its own rank whose dimensions walk domain
    dimensions of their size (a permute inside the kernel reorders them; shapes alone say nothing on a square
    tensor), a reduction's result only at the row it was reduced into, and a product only at its own positions.
    (Values loaded from memory are addressed through their strides at whatever map reaches them.)"""
    inside = set(names)
    seen: set[tuple[str, IndexMap]] = set()
    # (`permuted`: a `permuted_store` is stored at its permuted positions; a matmul's epilogue stores at its own)
    work: list[tuple[str, IndexMap, str]] = [(o, store_map(graph[o], domain, graph if permuted else None), o)
                                             for o in outputs]
    for name in names:
        if graph[name].kind == "reduction":
            source = graph[graph[name].inputs[0]]
            if alignment(source.type.shape, domain) != "full":
                return f"{name} reduces {source.name}, whose shape the kernel's domain does not cover"
            work.append((source.name, value_map(source.type.shape, domain, "full"), name))
    while work:
        value, index_map, user = work.pop()
        if value not in inside or (value, index_map) in seen:
            continue
        seen.add((value, index_map))
        node = graph[value]
        if len(index_map) != node.type.rank or not _walks_its_sizes(node, index_map, domain):
            # a walk this check cannot follow, or one that would index out of the value: do not fuse, never guess
            how = "is stored" if user == value else f"is read by {user}"
            return f"{value} {how} through a layout the kernel cannot index: it runs in a kernel of its own"
        if node.kind == "reduction":
            if not reads_own_row(node, index_map, domain):
                return (f"{user} reads the reduction result {value} along another axis than the rows it was reduced "
                        "into: needs a second kernel (the result is stored, then read back)")
        elif node.kind == "matmul":
            if not all(e == d or (e is None and size == 1)
                       for d, (e, size) in enumerate(zip(index_map, node.type.shape))):
                return (f"{user} reads the product {value} at other positions than its own (through a reordering "
                        "view): an epilogue sees only the accumulator's tile, so it runs as a kernel of its own")
        elif node.kind == "view":
            work.append((node.inputs[0], view_map(graph, node, index_map), value))
        elif node.op == "cat":
            dim = int(node.param("dim"))
            refs = [a.name for a in node.args if isinstance(a, Ref)]
            for part, ref in enumerate(refs):
                shifted = tuple(_Slice(e, part) if d == dim else e for d, e in enumerate(index_map))
                work.append((ref, shifted, value))
        elif node.op in ("pad", "roll"):
            moved = _moved_dims(node)
            shifted = tuple(_Slice(e, node.op) if d in moved else e for d, e in enumerate(index_map))
            work.append((node.inputs[0], shifted, value))
        elif node.op == "index":  # the table is read at computed positions (outside the kernel: `analyse`)
            work.extend((a.name, index_map, value) for a in node.args[1:] if isinstance(a, Ref))
        else:
            work.extend((a.name, index_map, value) for a in node.args if isinstance(a, Ref))
    return None


def _walks_its_sizes(node: Node, index_map: IndexMap, domain: Domain) -> bool:
    """Whether each dimension of `node` read at `index_map` walks a domain dimension of its own size (a size-1 one
    reads index 0; a slice of a concatenation or padding is checked by its own range guard)."""
    for size, entry in zip(node.type.shape, index_map):
        if entry is None:
            if size != 1:
                return False
        elif isinstance(entry, int) and size != domain.shape[entry]:
            return False
    return True


def _moved_dims(node: Node) -> set[int]:
    """The dimensions a pad or roll reads its operand at another index along."""
    if node.op == "roll":
        return {int(d) for d in node.param("dims")}
    return {d for d, before in enumerate(node.param("before")) if before != 0}


def indexed_table(node: Node) -> str | None:
    """The table an indirect load (`index`: embedding, gather, x[idx]) reads at computed positions, or None."""
    if node.kind == "pointwise" and node.op == "index":
        table = node.args[0]
        return table.name if isinstance(table, Ref) else None
    return None


def table_blocker(nodes: Sequence[Node], names: set[str]) -> str | None:
    """Why a kernel over `names` cannot hold the table it indexes (None if none does). The table is read at
    positions only the index tensor knows, anywhere in it: the whole tensor must be in memory before the kernel
    starts, so it is never computed by the kernel that indexes it (the index tensor itself is read like a
    pointwise operand and fuses)."""
    for node in nodes:
        table = indexed_table(node)
        if table is not None and table in names:
            return (f"{node.name} reads {table} at computed positions (an indirect load, as embedding and gather "
                    f"do): {table} must be whole in memory first, so it is written by another kernel")
    return None


def analyse(graph: Graph, names: Sequence[str], outputs: Sequence[str]) -> Domain | str:
    """The domain of the kernel made of `names` that stores `outputs`, or the reason it cannot exist."""
    nodes = [graph[n] for n in names]
    blocker = table_blocker(nodes, set(names))
    if blocker:
        return blocker
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
        # (a value stored in another dimension order as well as others: the others' order is the domain's)
        stored = [graph[n] for n in outputs if not permuted_copy(graph, graph[n])] \
            or [graph[n] for n in outputs] or nodes
        widest = max(stored, key=lambda n: (len(non_unit(n.type.shape)), str(n.type.numel)))
        domain = Domain(tuple(widest.type.shape), ())
    for name in outputs:
        node = graph[name]
        if alignment(node.type.shape, domain) is None and permuted_store(graph, node, domain) is None:
            return (f"{node.name} ({node.type.text()}) would be written by a kernel that walks "
                    f"{tuple(domain.shape)}: one kernel writes values of one shape (or its reduced rows)")
    for node in nodes:
        if node.kind in ("pointwise", "reduction") and alignment(node.type.shape, domain) is None \
                and not _feeds_index_views(node, set(names), graph) and permuted_store(graph, node, domain) is None:
            return f"{node.name} ({node.type.text()}) does not line up with the kernel's shape {tuple(domain.shape)}"
    return misread(graph, names, outputs, domain) or domain


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
                and not _feeds_index_views(node, group, graph):
            return (f"{node.name} ({node.type.text()}) does not line up with the matmul's output "
                    f"{tuple(domain.shape)}")
    return misread(graph, list(names), outputs, domain, permuted=False) or domain


def _feeds_index_views(node: Node, group: set[str], graph: Graph) -> bool:
    """A value of another shape inside a group is fine when it only feeds broadcasts and reorderings (computed per
    element; `misread` checks each read of it against the domain's sizes)."""
    users = [graph[m] for m in group if node.name in graph[m].inputs]  # (the group's members only: compile time)
    return bool(users) and all(u.op in INDEX_VIEWS or u.kind == "pointwise" for u in users)


# -- the same rules for a pair of whole groups, in the words of a fusion decision -----------------------------------
def extern_blocker(producer: Sequence[Node], consumer: Sequence[Node]) -> str | None:
    """Why two groups cannot share a kernel because one of them is an extern op (None if neither is)."""
    for side in (producer, consumer):
        if group_kind(n.kind for n in side) == "extern":
            op = side[0].op
            where = "cuBLAS" if any(k in op for k in ("mm", "matmul", "linear", "bmm")) else "eager PyTorch"
            return f"extern op: {op} runs in {where} between kernels"
    return None


def matmul_blocker(producer: Sequence[Node], consumer: Sequence[Node]) -> str | None:
    """Why a generated Triton matmul cannot take in the other group (None if it can, or neither is a matmul).
    A matmul kernel fuses pointwise consumers of its [M, N] output (an epilogue on the accumulator tile); not a
    reduction over it, a second matmul, or a prologue into its operands."""
    producer_kind, consumer_kind = group_kind(n.kind for n in producer), group_kind(n.kind for n in consumer)
    if producer_kind == "matmul" and consumer_kind == "matmul":
        return ("a consumer needing another matmul: the second product needs the first one's whole output, so each "
                "matmul is a kernel of its own")
    if consumer_kind == "matmul":
        operands = {v for n in consumer if n.kind == "matmul" for v in n.inputs}
        if any(n.name in operands for n in producer):
            return ("prologue into the matmul's inputs: not fused (the matmul loads its operands tile by tile from "
                    "memory, through their strides)")
    elif producer_kind == "matmul" and consumer_kind == "reduction":
        return ("a reduction over the matmul's output: its rows span the tiles of several programs, so it runs as a "
                "kernel of its own")
    return None


def pair_blocker(producer: Sequence[Node], consumer: Sequence[Node]) -> str | None:
    """Why a producer group and its consumer group can never be one kernel, whatever a policy prefers (None when
    only their shapes are left to check: `analyse` on the merged nodes)."""
    return extern_blocker(producer, consumer) or matmul_blocker(producer, consumer)


def traffic(graph: Graph, members: Sequence[str], stored: Sequence[str]) -> tuple[int, int]:
    """Bytes read and written by one kernel over these nodes: each input tensor is read once and each stored
    value written once (broadcast loads hit the cache)."""
    inside = set(members)
    inputs = dict.fromkeys(view_source(graph, v) for m in members for v in graph[m].inputs if v not in inside)
    return sum(graph.nbytes(v) for v in inputs), sum(graph.nbytes(v) for v in stored)
