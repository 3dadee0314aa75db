"""Sibling reductions: two reduction kernels over the same rows that read the same tensor, neither needing the
other's result, become one kernel that reads the tensor once.

The fusion pass merges producers into consumers; two reductions that only share an input are neither. layer_norm's
backward sums `grad * x_hat` and `grad` down the columns for its weight and bias gradients: two kernels, each
reading `grad` (67 MB at 8192 x 4096 in bf16). Batch norm's backward does the same over (N, H, W). Inductor's
scheduler fuses such siblings ("horizontal" fusion); here the pass, after its producer -> consumer walk, merges
reductions over the same iteration domain when no third kernel sits between them. They need not read a tensor in
common yet: the weight gradient reads `grad * x_hat` from the row kernel, and reads `grad` itself only once that
value is recomputed (fusion/recompute.py); merged, the kernel makes one launch instead of two either way.

    >>> pair = next_pair(partition, forbidden)     # (first group, second group, a tensor both read) or None
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from fusionlab.fusion.domain import Domain, analyse, view_source

# Reductions one merged kernel may hold. Merging is pairwise and repeats: BERT's backward has 24 layer norms whose
# weight and bias gradients all sum over the same rows, and no bound merged their 48 sums into one kernel reading 480
# MB through 682 arguments, which Triton's compiler did not finish in minutes on the H200 host (a training step
# that never started). Four keeps one layer norm's pair, or two, together.
MAX_REDUCTIONS = 4

if TYPE_CHECKING:
    from fusionlab.fusion.fuse import _Partition


def next_pair(partition: _Partition, forbidden: Set[tuple[str, str]]) -> tuple[str, str, str | None] | None:
    """The first two sibling reduction groups (in program order) that can be one kernel, and a tensor both read
    (None when they share none: one launch fewer, and a value recomputed later may then be read once)."""
    graph = partition.graph
    order = {group: partition.order[members[0]] for group, members in partition.members.items()}
    by_domain: dict[Domain, list[str]] = {}  # a domain -> its reduction groups, in program order
    for group in sorted(partition.members, key=order.__getitem__):
        if partition.info(group).kind == "reduction":
            domain = analyse(graph, partition.members[group], partition.stored(partition.members[group]))
            if isinstance(domain, Domain):
                by_domain.setdefault(domain, []).append(group)
    for domain, groups in by_domain.items():
        for index, first in enumerate(groups):
            for second in groups[index + 1:]:
                if _can_merge(partition, first, second, forbidden, domain):
                    return first, second, _shared(partition, first, second)
    return None


def _shared(partition: _Partition, first: str, second: str) -> str | None:
    graph = partition.graph
    theirs = {view_source(graph, v) for v in partition.external_inputs(second)}
    return next((v for v in (view_source(graph, u) for u in partition.external_inputs(first)) if v in theirs
                 and graph[v].type.rank > 0), None)


def _can_merge(partition: _Partition, first: str, second: str, forbidden: Set[tuple[str, str]],
               domain: Domain) -> bool:
    graph = partition.graph
    a, b = partition.members[first], partition.members[second]
    if any((x in a and y in b) or (x in b and y in a) for x, y in forbidden):
        return False
    if any(v in a for v in partition.external_inputs(second)) or any(v in b for v in partition.external_inputs(first)):
        return False  # one reads the other: a producer and its consumer, the main pass's business
    if partition.creates_cycle(first, second) or partition.creates_cycle(second, first):
        return False
    if sum(1 for n in a + b if graph[n].kind == "reduction") > MAX_REDUCTIONS:
        return False
    return analyse(graph, a + b, partition.stored(a + b)) == domain
