"""The fusion pass: greedy producer->consumer merging, one recorded decision per pair considered.

Start with one group per primitive. Walk the consumers in program order; for each value a consumer group reads
from another group, ask (1) the user's forbid/force lists, (2) the policy, (3) whether one kernel can hold both
(one iteration domain) and (4) whether merging would create a cycle. Every answer is a `FusionDecision`.

    >>> result = fuse(graph, DefaultFusion())
    >>> [d.fused for d in result.decisions]
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from fusionlab.fusion import siblings
from fusionlab.fusion.domain import Domain, analyse, traffic
from fusionlab.fusion.kinds import KERNEL_GROUP_KINDS, GroupKind
from fusionlab.fusion.policy import GroupInfo, Policy, Verdict
from fusionlab.fusion.recompute import recompute
from fusionlab.ir import Graph, draws_random_numbers


class FusionError(ValueError):
    """A requested fusion cannot be done; the message says why."""


@dataclass(frozen=True)
class FusionDecision:
    """One pair the pass considered: the value's producer node, its consumer node, and the verdict."""

    step: int
    producer: str
    consumer: str
    fused: bool
    reason: str
    bytes_saved: int
    producer_group: tuple[str, ...] = ()
    consumer_group: tuple[str, ...] = ()


@dataclass(frozen=True)
class FusionGroup:
    """Nodes that become one kernel (or one extern call, or one view between kernels)."""

    name: str
    kind: GroupKind
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bytes_read: int
    bytes_written: int
    origins: tuple[str, ...]
    domain: Domain | None
    # module paths of its compute nodes, in program order, each once ("" for top-level code beside them); () when no
    # node has a module (a plain function)
    modules: tuple[str, ...] = ()
    # nodes of other groups this kernel computes again instead of loading their stored values (fusion/recompute.py)
    recomputed: tuple[str, ...] = ()

    @property
    def is_kernel(self) -> bool:
        return self.kind in KERNEL_GROUP_KINDS

    @property
    def module(self) -> str:
        """The longest dotted prefix its modules share ("transformer.h.0.attn"), "" if none."""
        return common_module(self.modules)


def common_module(modules: Iterable[str]) -> str:
    """The longest dotted prefix of `modules`: ("h.0.attn.q", "h.0.attn.k") -> "h.0.attn"; "" if none."""
    paths = [m.split(".") for m in modules]
    if not paths or any(not m or m == [""] for m in paths):
        return ""
    shared: list[str] = []
    for parts in zip(*paths):
        if any(p != parts[0] for p in parts):
            break
        shared.append(parts[0])
    return ".".join(shared)


@dataclass(frozen=True)
class FuseResult:
    """What the pass produced: the groups, every decision in order, and the partition each one left behind.
    The `Fused` stage (stages.py) wraps it with where it came from."""

    groups: tuple[FusionGroup, ...]
    decisions: tuple[FusionDecision, ...]
    partitions: Sequence[tuple[tuple[str, ...], ...]]  # the partition after each decision (index 0: before any)
    policy: str = ""  # the policy's name


class Partitions(Sequence[tuple[tuple[str, ...], ...]]):
    """The partition after each decision (index 0: before any), replayed from the merges on first use: a model's
    graph makes thousands of decisions, and only the step-through views read the partitions."""

    def __init__(self, graph: Graph, merges: Sequence[tuple[str, str] | None]) -> None:
        self._graph = graph
        self._merges = tuple(merges)  # per decision: (producer group, consumer group) merged, or None
        self._all: tuple[tuple[tuple[str, ...], ...], ...] | None = None

    def _replayed(self) -> tuple[tuple[tuple[str, ...], ...], ...]:
        if self._all is None:
            partition = _Partition(self._graph)
            snapshots = [partition.snapshot()]
            for merge in self._merges:
                if merge is not None:
                    partition.merge(*merge)
                snapshots.append(partition.snapshot())
            self._all = tuple(snapshots)
        return self._all

    def __len__(self) -> int:
        return len(self._merges) + 1

    @overload
    def __getitem__(self, index: int) -> tuple[tuple[str, ...], ...]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[tuple[str, ...], ...]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self._replayed()[index]

    def __repr__(self) -> str:
        return f"Partitions({len(self)} steps)"


class _Partition:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        computing = [n.name for n in graph.nodes if n.kind != "input"]
        self.group_of = {name: name for name in computing}
        self.members: dict[str, list[str]] = {name: [name] for name in computing}
        self.order = {n.name: i for i, n in enumerate(graph.nodes)}
        self.users = graph.users()
        self.outputs = set(graph.outputs)
        self.random = {n.name for n in graph.nodes if draws_random_numbers(n)}

    def snapshot(self) -> tuple[tuple[str, ...], ...]:
        """The groups in an order that runs: every group after the groups it reads (ties: program order), and the
        random ops in program order.

        Sorting by first member is not enough: a group whose first node comes early may read a value produced
        later in program order (an extern constant feeding the end of a fused chain). Random ops keep their order
        apart from their data: a dropout mask that reads only a shape would otherwise be drawn before an earlier
        one, and draw other numbers than eager from the same generator state."""
        first = {group: self.order[members[0]] for group, members in self.members.items()}
        waiting = {group: {self.group_of[v] for v in self.external_inputs(group) if v in self.group_of}
                   for group in self.members}
        readers: dict[str, list[str]] = {}
        for group, needs in waiting.items():
            for need in needs:
                readers.setdefault(need, []).append(group)
        drawing = sorted({self.group_of[n] for n in self.random}, key=first.__getitem__)
        turn = dict(zip(drawing, drawing[1:]))  # a random group -> the one that draws next
        blocked = set(drawing[1:])  # waiting for the previous random group to draw
        ready = [(first[g], g) for g, needs in waiting.items() if not needs and g not in blocked]
        held = [(first[g], g) for g, needs in waiting.items() if not needs and g in blocked]  # not yet their turn
        heapq.heapify(ready)
        ordered: list[tuple[str, ...]] = []
        while ready or held:
            if not ready:  # a fused group needs a later draw before an earlier one: keep the data order
                ready.append(min(held))
                held.remove(ready[0])
                blocked.discard(ready[0][1])
            _, group = heapq.heappop(ready)
            ordered.append(tuple(self.members[group]))
            following = turn.get(group)
            if following is not None:
                blocked.discard(following)
                if (first[following], following) in held:
                    held.remove((first[following], following))
                    heapq.heappush(ready, (first[following], following))
            for other in readers.get(group, ()):
                needs = waiting[other]
                needs.discard(group)
                if not needs:
                    heapq.heappush(held if other in blocked else ready, (first[other], other))
        assert len(ordered) == len(self.members), "fusion groups form a cycle"
        return tuple(ordered)

    def external_inputs(self, group: str) -> list[str]:
        members = set(self.members[group])
        seen: dict[str, None] = {}
        for name in self.members[group]:
            for value in self.graph[name].inputs:
                if value not in members:
                    seen[value] = None
        return list(seen)

    def stored(self, members: Iterable[str]) -> list[str]:
        inside = set(members)
        return [m for m in sorted(inside, key=self.order.__getitem__)
                if m in self.outputs or any(u not in inside for u in self.users[m])]

    def creates_cycle(self, producer: str, consumer: str) -> bool:
        """Merging is illegal if the consumer is reachable from the producer through a third group."""
        start = [self.group_of[u] for m in self.members[producer] for u in self.users[m]
                 if self.group_of.get(u) not in (producer, consumer, None)]
        seen: set[str] = set()
        while start:
            group = start.pop()
            if group == consumer:
                return True
            if group in seen:
                continue
            seen.add(group)
            start.extend(self.group_of[u] for m in self.members[group] for u in self.users[m]
                         if self.group_of.get(u) not in (group, None))
        return False

    def merge(self, producer: str, consumer: str) -> None:
        merged = sorted(self.members[producer] + self.members[consumer], key=self.order.__getitem__)
        del self.members[producer]
        self.members[consumer] = merged
        for name in merged:
            self.group_of[name] = consumer

    def info(self, group: str) -> GroupInfo:
        return GroupInfo(tuple(self.graph[n] for n in self.members[group]))


def _bytes_saved(partition: _Partition, producer: str, consumer: str) -> int:
    """The memory traffic the merge removes: the intermediates no longer written and read back, and the inputs
    both groups read, now read once (as the groups count their bytes)."""
    graph = partition.graph

    def moved(members: list[str]) -> int:
        if GroupInfo(tuple(graph[m] for m in members)).kind == "view":
            return 0  # a view moves no bytes of its own
        read, written = traffic(graph, members, partition.stored(members))
        return read + written

    first, second = partition.members[producer], partition.members[consumer]
    return moved(first) + moved(second) - moved(first + second)


def fuse(graph: Graph, policy: Policy, forbid: Sequence[tuple[str, str]] = (),
         force: Sequence[tuple[str, str]] = ()) -> FuseResult:
    partition = _Partition(graph)
    forbidden: set[tuple[str, str]] = {(a, b) for a, b in forbid}
    forced: set[tuple[str, str]] = {(a, b) for a, b in force}
    _check_names(graph, forbidden | forced)
    decisions: list[FusionDecision] = []
    merges: list[tuple[str, str] | None] = []
    considered: set[tuple[frozenset[str], frozenset[str]]] = set()
    rejected: set[tuple[str, str, str]] = set()
    for node in graph.nodes:
        if node.kind == "input":
            continue
        while True:
            consumer = partition.group_of[node.name]
            if partition.info(consumer).kind == "view" and not _forced_into(forced, partition, consumer):
                break  # a view joins its consumer, never its producer: that would store a broadcast copy
            candidates = []
            for value in partition.external_inputs(consumer):
                producer = partition.group_of.get(value)
                if producer is None:
                    continue
                key = (frozenset(partition.members[producer]), frozenset(partition.members[consumer]))
                if key in considered:
                    continue
                user = next(m for m in partition.members[consumer] if value in graph[m].inputs)
                # Views join their consumer first, so a broadcast never looks like a kernel in between.
                candidates.append((partition.info(producer).kind != "view",
                                   -policy.score(partition.info(producer), partition.info(consumer)),
                                   partition.order[value], value, user, producer, key))
            if not candidates:
                break
            *_, value, user, producer, key = min(candidates)
            considered.add(key)
            verdict = _decide(partition, policy, producer, consumer, (value, user), forbidden, forced)
            if not verdict.ok and (value, user, verdict.reason) in rejected:
                continue  # the same pair, refused for the same reason after its consumer grew: said once
            if not verdict.ok:
                rejected.add((value, user, verdict.reason))
            decisions.append(FusionDecision(
                len(decisions), value, user, verdict.ok, verdict.reason,
                _bytes_saved(partition, producer, consumer) if verdict.ok else 0,
                tuple(partition.members[producer]), tuple(partition.members[consumer])))
            if verdict.ok:
                partition.merge(producer, consumer)
            merges.append((producer, consumer) if verdict.ok else None)
    if getattr(policy, "siblings", False):
        while (pair := siblings.next_pair(partition, forbidden)) is not None:
            first, second, common = pair
            shared = f", both read {common}: one kernel reads it once" if common else ": one kernel, one launch"
            decisions.append(FusionDecision(
                len(decisions), _first_reduction(partition, first), _first_reduction(partition, second), True,
                f"siblings: both reduce the same rows and neither needs the other{shared}",
                _bytes_saved(partition, first, second),
                tuple(partition.members[first]), tuple(partition.members[second])))
            partition.merge(first, second)
            merges.append((first, second))
    for a, b in sorted(forced):
        if partition.group_of[a] != partition.group_of[b]:
            raise FusionError(f"cannot force fusing {a} into {b}: {b} does not read {a} (directly or through views), "
                              "so the pass never considers them as a pair; force each step of the path between them")
    groups = tuple(describe_group(graph, members, partition.stored(members), index)
                   for index, members in enumerate(partition.snapshot()))
    if getattr(policy, "recompute", False):
        groups = recompute(graph, groups, {name for pair in forbidden for name in pair})
    return FuseResult(groups, tuple(decisions), Partitions(graph, merges), policy.name)


def _shared_view(partition: _Partition, producer: str, consumer: str) -> str | None:
    """Why a view stays between kernels although its consumer could take it in (None if it need not): an extern op,
    a matmul or the caller reads it too, and either it shows a graph input or an extern's result, which no kernel
    computes (in the consumer's kernel it would be written out as a copy for that other reader; between kernels it
    costs nothing), or it reorders dimensions (a kernel would write it in its own order, and the extern would get a
    dense copy instead of the layout the program chose: a channels-last input of a convolution)."""
    if partition.info(producer).kind != "view":
        return None
    graph, inside = partition.graph, set(partition.members[producer]) | set(partition.members[consumer])
    elsewhere = [u for m in partition.members[producer] for u in partition.users[m]
                 if u not in inside and graph[u].kind in ("extern", "matmul")]
    elsewhere += ["the caller" for m in partition.members[producer] if m in partition.outputs]
    if not elsewhere:
        return None
    source = partition.external_inputs(producer)[0]
    reorders = any(graph[m].op == "permute" for m in partition.members[producer])
    if not reorders and graph[source].kind != "input" and partition.info(partition.group_of[source]).kind != "extern":
        return None
    why = ("the layout it gives that reader would be lost: a kernel writes what it stores in its own order"
           if reorders else "inside this kernel it would be written out as a copy for that reader")
    return f"{partition.members[producer][-1]} is a view of {source} that {elsewhere[0]} reads too: it stays a view " \
           f"between kernels ({why})"


def _first_reduction(partition: _Partition, group: str) -> str:
    return next(m for m in partition.members[group] if partition.graph[m].kind == "reduction")


def _forced_into(forced: set[tuple[str, str]], partition: _Partition, group: str) -> bool:
    return any(consumer in partition.members[group] for _, consumer in forced)


def _check_names(graph: Graph, pairs: set[tuple[str, str]]) -> None:
    for pair in pairs:
        for name in pair:
            if name not in graph:
                known = ", ".join(n.name for n in graph.nodes if n.kind != "input")
                raise FusionError(f"no node named {name!r} in the decomposed graph; its nodes are: {known}")


def _decide(partition: _Partition, policy: Policy, producer: str, consumer: str, pair: tuple[str, str],
            forbidden: set[tuple[str, str]], forced: set[tuple[str, str]]) -> Verdict:
    members = partition.members[producer] + partition.members[consumer]

    def legality() -> str | None:  # computed only when the pair could fuse: it walks the graph
        found = analyse(partition.graph, members, partition.stored(members))
        if isinstance(found, str):
            return found
        if partition.creates_cycle(producer, consumer):
            return "fusing them would create a cycle: another kernel sits between them"
        return None

    # A forced pair also pulls in the views between them (a reduction reaches its epilogue through an expand).
    sources = partition.members[producer] + (partition.external_inputs(producer)
                                             if partition.info(producer).kind == "view" else [])
    is_forced = any(a in sources and b in partition.members[consumer] for a, b in forced)
    if pair in forbidden or any(a in partition.members[producer] and b in partition.members[consumer]
                                for a, b in forbidden):
        return Verdict(False, "forbidden by the user (with_fusion(forbid=...))")
    if is_forced:
        blocker = legality()
        if blocker is not None:
            raise FusionError(f"cannot force fusing {pair[0]} into {pair[1]}: {blocker}")
        return Verdict(True, "forced by the user (with_fusion(force=...))")
    shared = _shared_view(partition, producer, consumer)
    if shared is not None:
        return Verdict(False, shared)
    verdict = policy.can_fuse(partition.info(producer), partition.info(consumer))
    if not verdict.ok:
        return verdict
    blocker = legality()
    return verdict if blocker is None else Verdict(False, blocker)


def describe_group(graph: Graph, members: Sequence[str], stored: Sequence[str], index: int) -> FusionGroup:
    nodes = [graph[m] for m in members]
    info = GroupInfo(tuple(nodes))
    inside = set(members)
    inputs = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in inside))
    domain = None
    if info.kind in KERNEL_GROUP_KINDS:
        result = analyse(graph, members, stored)
        domain = result if isinstance(result, Domain) else None
    read, written = (0, 0) if info.kind == "view" else traffic(graph, members, stored)
    ops = [n.op for n in nodes if n.kind in ("pointwise", "reduction", "matmul", "extern")] or [nodes[0].op]
    label = "_".join(dict.fromkeys(o.replace(".", "_") for o in ops))
    name = f"{info.kind}_{index}_{label[:48]}"
    origins = tuple(dict.fromkeys(n.origin for n in nodes))
    computing = [n for n in nodes if n.kind != "view"] or nodes
    modules = tuple(dict.fromkeys(n.module for n in computing))
    modules = modules if any(modules) else ()
    return FusionGroup(name, info.kind, tuple(members), tuple(inputs), tuple(stored), read, written, origins,
                       domain, modules)
