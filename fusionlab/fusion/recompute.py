"""Recompute, don't store: a pointwise value one kernel computes and another kernel reads is computed again by the
reader, from what the value is computed from, where reading that costs no more than reading the value.

Fusion puts each node in one group. A pointwise value used by two kernels that cannot be one (a column sum and a
row reduction of rms_norm's backward; cross-entropy's statistics and, after the loss, its gradient) is then written
by the first and read back by the second: rms_norm's backward wrote four float32 [rows, width] intermediates, one of
them `rstd` broadcast to the full shape, for the row kernel to read (740 MB where 335 would do). Inductor inlines
pointwise values into every reader instead. Here, after the partition, each kernel group looks at the values it
loads from other kernel groups; a value whose cone (the cheap pointwise ops and broadcasts of its own group that
compute it, back to that group's inputs and reduction results) reads no more bytes that the reader does not read
already than the value itself holds, and that the reader's iteration domain can index, is recomputed there
(`FusionGroup.recomputed`); the store counts as saved only where no other kernel reads the value, also through a
view of it (a value stored channels-last is read through its permute: ResNet-50's backward recomputed each residual
gradient from every convolution gradient of its stage, 12.5 GB read in float32 where 9.8 do). The group that
computed it stores it only if someone still reads it. A group left with
nothing to store keeps its values (nothing is recomputed from it), so every node keeps one group that runs it.

    >>> groups = recompute(graph, groups)
    >>> [g.recomputed for g in groups]        # rms_norm's backward: the row kernel recomputes x * rstd, grad * w
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence, Set
from typing import TYPE_CHECKING

from fusionlab.decompose.primitives import INDEX_VIEWS, POINTWISE
from fusionlab.fusion.domain import Domain, analyse, permuted_store, traffic, view_source
from fusionlab.ir import Graph, Node

if TYPE_CHECKING:
    from fusionlab.fusion.fuse import FusionGroup

MAX_CONE = 32  # nodes one recomputation may add to a kernel (Inductor realizes a value past ~30 ops)
_COMPUTING = ("pointwise", "reduction")  # the group kinds that recompute and that are recomputed from


def recompute(graph: Graph, groups: Sequence[FusionGroup], keep: Set[str] = frozenset()) -> tuple[FusionGroup, ...]:
    """`groups` (FusionGroups in run order) with cheap pointwise values recomputed by the kernels that read them;
    each group's `inputs`, `outputs`, `bytes_read` and `bytes_written` follow. Nodes in `keep` (named in a
    forbidden pair) are never recomputed."""
    owner = {name: index for index, group in enumerate(groups) for name in group.nodes}
    users = graph.users()
    taken: dict[int, dict[str, int]] = {}  # reader group -> {recomputed node: the group it came from}
    for index, group in enumerate(groups):
        if group.kind not in _COMPUTING or group.domain is None:
            continue
        mine = taken.setdefault(index, {})
        while True:
            members = list(group.nodes) + list(mine)
            found = _next_cone(graph, groups, owner, users, index, members, keep)
            if found is None:
                break
            source, cone = found
            mine.update(dict.fromkeys(cone, source))
    for index in _emptied(graph, groups, owner, taken):  # undo what would leave a group storing nothing
        for mine in taken.values():
            for name in [n for n, source in mine.items() if source == index]:
                del mine[name]
    return _rebuilt(graph, groups, taken)


def _next_cone(graph: Graph, groups: Sequence[FusionGroup], owner: dict[str, int], users: dict[str, tuple[str, ...]],
               index: int, members: list[str], keep: Set[str]) -> tuple[int, list[str]] | None:
    """A value group `index` loads that it can recompute, and the nodes that recompute it; None if none."""
    group = groups[index]
    inside = set(members)
    loads = _loads(graph, members)
    for value in loads:
        source = owner.get(value)
        if source is None or source == index or groups[source].kind not in _COMPUTING:
            continue
        cone = _cone(graph, value, set(groups[source].nodes) - inside, groups[source].domain)
        if cone is None or any(name in keep for name in cone):
            continue
        leaves = [leaf for leaf in _loads(graph, cone) if leaf not in inside]
        extra = sum(graph.nbytes(view_source(graph, leaf)) for leaf in leaves if leaf not in loads)
        saved = graph.nbytes(value)  # the load; and the store, where no other group and no caller reads the value
        if _read_only_by(graph, owner, users, value, source) <= {source, index}:
            saved += graph.nbytes(value)
        if extra > saved:
            continue
        domain = analyse(graph, members + cone, group.outputs)
        if isinstance(domain, Domain) and domain == group.domain:
            return source, cone
    return None


def _read_only_by(graph: Graph, owner: dict[str, int], users: dict[str, tuple[str, ...]], value: str,
                  source: int) -> set[int]:
    """The groups that read `value`, also through the index views of it that its own group `source` makes (a value
    stored channels-last is read through its permute, decompose/layout.py: the view's readers read the value), and
    -1 where a caller gets it or a view of it."""
    groups: set[int] = set()
    work, seen = [value], set()
    while work:
        name = work.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph.outputs:
            groups.add(-1)
        for user in users.get(name, ()):
            node = graph[user]
            if owner.get(user) == source and node.kind == "view" and node.op in INDEX_VIEWS:
                work.append(user)
            else:
                groups.add(owner.get(user, -1))
    return groups


def _cone(graph: Graph, value: str, group: set[str], domain: Domain | None) -> list[str] | None:
    """The nodes of `group` (whose kernel walks `domain`) that compute `value` from the group's inputs, reduction
    results and the permuted copies it stores permuted (and from what the reader computes already: left out of
    `group`), in program order; None when one of them is no cheap pointwise op or index-only view, or there are more
    than MAX_CONE."""
    cone: set[str] = set()
    work = [value]
    while work:
        name = work.pop()
        if name in cone or name not in group:
            continue
        node = graph[name]
        if name != value and (node.kind == "reduction" or _storable_copy(graph, node, domain)):
            # a reduction result is read (its group stores it), not recomputed; so is a value stored in another
            # dimension order (decompose/layout.py), where its group can store it: a reader of its view reads it
            continue
        cheap = (node.kind == "pointwise" and (node.op in POINTWISE or node.op in ("cast", "full", "iota"))) or \
            (node.kind == "view" and node.op in INDEX_VIEWS)
        if not cheap or len(cone) >= MAX_CONE:
            return None
        cone.add(name)
        work.extend(node.inputs)
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    return sorted(cone, key=order.__getitem__)


def _storable_copy(graph: Graph, node: Node, domain: Domain | None) -> bool:
    """`copy(permute(v))` that the kernel walking `domain` stores at the permuted positions (`permuted_store`; not a
    copy of a row-shaped value after a reduction, which that kernel's domain cannot write)."""
    return domain is not None and permuted_store(graph, node, domain) is not None


def _loads(graph: Graph, members: Sequence[str]) -> list[str]:
    """The values `members` read from outside themselves, in order."""
    inside = set(members)
    return list(dict.fromkeys(v for m in members for v in graph[m].inputs if v not in inside))


def _live(graph: Graph, members: list[str], stored: list[str]) -> list[str]:
    """The members the stored values need (a value now recomputed by its readers may need nothing else here)."""
    inside, needed, work = set(members), set(), list(stored)
    while work:
        name = work.pop()
        if name in inside and name not in needed:
            needed.add(name)
            work.extend(graph[name].inputs)
    return [m for m in members if m in needed]


def _readers(graph: Graph, groups: Sequence[FusionGroup], taken: dict[int, dict[str, int]]) -> set[str]:
    """Every value some group loads from memory."""
    read: set[str] = set()
    for index, group in enumerate(groups):
        read.update(_loads(graph, list(group.nodes) + list(taken.get(index, {}))))
    return read


def _stored(graph: Graph, group: FusionGroup, read: set[str]) -> list[str]:
    outputs = set(graph.outputs)
    return [n for n in group.nodes if n in outputs or n in read]


def _emptied(graph: Graph, groups: Sequence[FusionGroup], owner: dict[str, int],
             taken: dict[int, dict[str, int]]) -> list[int]:
    read = _readers(graph, groups, taken)
    return [i for i, group in enumerate(groups)
            if group.kind in _COMPUTING and group.outputs and not _stored(graph, group, read)]


def _rebuilt(graph: Graph, groups: Sequence[FusionGroup], taken: dict[int, dict[str, int]]) -> tuple[FusionGroup, ...]:
    if not any(taken.values()):
        return tuple(groups)
    read = _readers(graph, groups, taken)
    rebuilt = []
    for index, group in enumerate(groups):
        extra = tuple(taken.get(index, {}))
        if group.kind not in _COMPUTING:
            rebuilt.append(group)
            continue
        stored = _stored(graph, group, read)
        members = _live(graph, list(group.nodes) + list(extra), stored)
        read_bytes, written_bytes = traffic(graph, members, stored)
        rebuilt.append(dataclasses.replace(group, inputs=tuple(_loads(graph, members)), outputs=tuple(stored),
                                           recomputed=extra, bytes_read=read_bytes, bytes_written=written_bytes))
    return tuple(rebuilt)
