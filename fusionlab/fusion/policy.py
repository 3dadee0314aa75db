"""Fusion policies: small objects that say whether a producer group may fuse into a consumer group, and why.

A policy only states preference; whether a kernel can exist at all is legality, stated once in `fusion/domain.py`:
the built-in policies ask it (`domain.pair_blocker`) so that their verdicts say why, and the fusion pass checks
it for every policy (one iteration domain, no cycle). Write your own in a notebook cell:

    >>> class OnlyExp:
    ...     name = "only-exp"
    ...     def can_fuse(self, producer, consumer):
    ...         return Verdict("exp" in producer.ops, "fuse only after exp")
    ...     def score(self, producer, consumer):
    ...         return 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fusionlab.fusion.domain import extern_blocker, pair_blocker
from fusionlab.fusion.kinds import GroupKind, group_kind
from fusionlab.ir import Node


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str


@dataclass(frozen=True)
class GroupInfo:
    """What a policy sees of a group: its nodes and their kinds."""

    nodes: tuple[Node, ...]

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)

    @property
    def kind(self) -> GroupKind:
        return group_kind(n.kind for n in self.nodes)

    @property
    def label(self) -> str:
        return "+".join(n.name for n in self.nodes)


class Policy(Protocol):
    name: str

    def can_fuse(self, producer: GroupInfo, consumer: GroupInfo) -> Verdict: ...

    def score(self, producer: GroupInfo, consumer: GroupInfo) -> int: ...


def _extern_reason(producer: GroupInfo, consumer: GroupInfo) -> Verdict | None:
    """An extern op never shares a kernel: say why it is one, in the words decomposition recorded when the op runs
    outside on purpose ("extern op: aten.convolution.default runs in cuDNN: ...")."""
    blocker = extern_blocker(producer.nodes, consumer.nodes)
    if blocker is None:
        return None
    for node in (*producer.nodes, *consumer.nodes):
        reason = node.param("reason") if node.kind == "extern" else None
        if isinstance(reason, str) and reason.startswith(f"{node.op} "):
            return Verdict(False, f"extern op: {reason}")
    return Verdict(False, blocker)


POINTWISE_PAIR = Verdict(True, "both are pointwise over the same elements: one pass, the intermediate stays in "
                               "registers")


class NoFusion:
    """One kernel per primitive: the unfused baseline."""

    name = "none"

    def can_fuse(self, producer: GroupInfo, consumer: GroupInfo) -> Verdict:
        return _extern_reason(producer, consumer) or Verdict(False, "policy 'none': one kernel per primitive")

    def score(self, producer: GroupInfo, consumer: GroupInfo) -> int:
        return 0


class PointwiseFusion:
    """Fuse chains of pointwise ops; reductions stay kernels of their own."""

    name = "pointwise"

    def can_fuse(self, producer: GroupInfo, consumer: GroupInfo) -> Verdict:
        blocked = _extern_reason(producer, consumer)
        if blocked:
            return blocked
        if producer.kind == "reduction" or consumer.kind == "reduction":
            return Verdict(False, "policy 'pointwise' keeps reductions in kernels of their own")
        if "matmul" in (producer.kind, consumer.kind):
            return Verdict(False, "policy 'pointwise' keeps matmuls in kernels of their own")
        return POINTWISE_PAIR

    def score(self, producer: GroupInfo, consumer: GroupInfo) -> int:
        return 1


class DefaultFusion:
    """Pointwise chains, reductions with their pointwise prologue and epilogue, and matmul epilogues."""

    name = "default"
    # a cheap pointwise value one kernel computes and another reads is computed again by the reader instead of being
    # stored (fusion/recompute.py); a policy without this attribute never recomputes
    recompute = True
    # two reductions over the same rows that read the same tensor and need nothing of each other share one kernel
    # (fusion/siblings.py); a policy without this attribute never merges siblings
    siblings = True

    def can_fuse(self, producer: GroupInfo, consumer: GroupInfo) -> Verdict:
        extern = _extern_reason(producer, consumer)
        if extern is not None:
            return extern
        blocker = pair_blocker(producer.nodes, consumer.nodes)
        if blocker is not None:
            return Verdict(False, blocker)
        kinds = (producer.kind, consumer.kind)
        if consumer.kind == "matmul":
            return Verdict(True, "operand of a matmul epilogue: computed per output element, on the accumulator tile")
        if producer.kind == "matmul":
            return Verdict(True, "matmul epilogue: applied to the accumulator tile before the store")
        if kinds == ("reduction", "reduction"):
            return Verdict(True, "both reduce the same rows: one kernel keeps the row in registers")
        if consumer.kind == "reduction":
            return Verdict(True, "pointwise prologue of a reduction: computed as the rows are loaded")
        if producer.kind == "reduction":
            return Verdict(True, "pointwise epilogue of a reduction: applied before the result is stored")
        return POINTWISE_PAIR

    def score(self, producer: GroupInfo, consumer: GroupInfo) -> int:
        return 2 if {"reduction", "matmul"} & {producer.kind, consumer.kind} else 1


BUILTIN_POLICIES: dict[str, type] = {"none": NoFusion, "pointwise": PointwiseFusion, "default": DefaultFusion}


def resolve_policy(policy: str | Policy) -> Policy:
    if isinstance(policy, str):
        if policy not in BUILTIN_POLICIES:
            raise ValueError(f"unknown fusion policy {policy!r}: use one of {sorted(BUILTIN_POLICIES)} or an "
                             "object with can_fuse(producer, consumer) and score(producer, consumer)")
        return BUILTIN_POLICIES[policy]()
    if not (hasattr(policy, "can_fuse") and hasattr(policy, "score")):
        raise TypeError(f"{policy!r} is not a fusion policy: it needs can_fuse(producer, consumer) -> Verdict and "
                        "score(producer, consumer) -> int")
    return policy
