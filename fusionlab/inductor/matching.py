"""Inductor's graph nodes matched onto our captured aten nodes, by stated rules, never by a guess.

Inductor compiles its own aten graph (functionalized, with its own decompositions), whose node names need not be
ours: our in-place `relu_` is `relu` there; our `native_layer_norm` is `var_mean, sub, rsqrt, ...` there, each of
which remembers (`meta["original_aten"]`) that it came from `aten.native_layer_norm`. The rules, tried in order:

1. "same name": the same name and op, from the same original op. An in-place op reads as its functional form
   (`relu_` is `relu`, `relu__1` is `relu_1`): Inductor's graph is functionalized, ours keeps the call's name.
2. "decomposed": Inductor decomposed op X and we kept X: the k-th call of X in Inductor's graph (its nodes told
   apart by the pre-grad node they came from) is our k-th node of op X, when the counts agree.
3. "op and order": the nodes left of one op and one original op, k-th with k-th, when the counts agree; then, for
   nodes whose original op we do not have at all (we decomposed it too), by op alone, when the counts agree.

Anything else is "unmatched", and the views say so. (A kernel also covers those of our nodes that no node of
Inductor's matches and whose op it lists, such as the `mm` inside Inductor's `addmm`: `InductorKernel.node_names`.)

    >>> ours = [OurNode("relu_", "relu_", "relu_")]
    >>> match_graph([InductorNode("relu", "relu", "relu")], ours)[0].ours
    'relu_'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["InductorNode", "NodeMatch", "OurNode", "RULES", "functional", "match_graph", "op_name"]

#: the rules in the order they are tried, and what each means (the views print these words)
RULES: dict[str, str] = {
    "same name": "same node name and op (in-place ops read as their functional form: relu_ is relu)",
    "decomposed": "Inductor rewrote our op (decomposed it, or folded it into a combined op such as addmm): its k-th "
                  "call of the op is our k-th node of it",
    "op and order": "the k-th of Inductor's remaining nodes of this op is our k-th (the counts agree)",
    "unmatched": "no rule applies (counts differ, or we have no node of this op): not guessed",
}


@dataclass(frozen=True)
class OurNode:
    """An aten node of our captured graph: `op` as written (`relu_`), `original` the op a capture decomposition
    replaced, else `op`. Example: `OurNode("add_1", "add", "_native_batch_norm_legit_no_training")`."""

    name: str
    op: str
    original: str


@dataclass(frozen=True)
class InductorNode:
    """A node of Inductor's graph that some scheduler operation lists as its origin.

    `original` is the op before Inductor's decompositions (`meta["original_aten"]`), `source` the pre-grad node it
    came from ("" when unknown), `graph` which of Inductor's graphs (a graph break makes several).
    Example: `InductorNode("var_mean", "var_mean", "native_layer_norm", source="layer_norm")`.
    """

    name: str
    op: str
    original: str
    source: str = ""
    graph: int = 0


@dataclass(frozen=True)
class NodeMatch:
    """Inductor's node `inductor` (in graph `graph`) is our node `ours` by `rule`; `ours` is None when unmatched."""

    inductor: str
    graph: int
    ours: str | None
    rule: str


def op_name(target: Any) -> str:
    """`aten.add.Tensor`, `torch.ops.aten.add.Tensor`, the OpOverload or `operator.getitem` -> "add", "getitem"."""
    packet = getattr(target, "_overloadpacket", None)
    if packet is None and callable(target) and hasattr(target, "__name__"):
        return str(target.__name__)
    text = str(packet if packet is not None else target)
    for prefix in ("torch.ops.", "aten."):
        text = text.removeprefix(prefix)
    return text.split(".")[0]


def functional(op: str) -> str:
    """The functional form of an in-place op's name: `relu_` -> `relu`; `__and__` and `_softmax` stay."""
    return re.sub(r"(?<=[A-Za-z0-9])_$", "", op)


def _functional_name(name: str, op: str) -> str:
    """`relu__1` (the second in-place relu_) -> `relu_1`, as the functional graph names it."""
    plain = functional(op)
    return plain + name[len(op):] if plain != op and name.startswith(op) else name


def match_graph(theirs: Sequence[InductorNode], ours: Sequence[OurNode]) -> tuple[NodeMatch, ...]:
    """One `NodeMatch` per node of `theirs` (Inductor's graphs in order), by the module's rules."""
    their_key = [(functional(t.op), functional(t.original)) for t in theirs]
    our_key = [(functional(o.op), functional(o.original)) for o in ours]
    found: dict[int, tuple[int, str]] = {}  # their index -> (our index, rule)
    claimed: set[int] = set()

    # 1. same name, op and original (only with one Inductor graph: a second graph's names restart)
    if len({t.graph for t in theirs}) <= 1:
        by_name = {(_functional_name(o.name, o.op), our_key[i]): i for i, o in enumerate(ours)}
        for index, node in enumerate(theirs):
            same = by_name.get((node.name, their_key[index]))
            if same is not None and same not in claimed:
                found[index] = (same, "same name")
                claimed.add(same)

    # 2. decomposed by Inductor, kept whole by us: the k-th call of the op is our k-th node of it
    our_ops: dict[str, list[int]] = {}
    for i, key in enumerate(our_key):
        our_ops.setdefault(key[0], []).append(i)
    calls: dict[str, dict[tuple[int, str], list[int]]] = {}
    for index, (op, original) in enumerate(their_key):
        if index not in found and op != original and original in our_ops:
            calls.setdefault(original, {}).setdefault((theirs[index].graph, theirs[index].source), []).append(index)
    for original, by_call in calls.items():
        mine = [i for i in our_ops[original] if i not in claimed]
        unknown_source = all(source == "" for _, source in by_call)
        if len(by_call) == len(mine) or (unknown_source and len(mine) == 1):
            targets = mine if len(by_call) == len(mine) else mine * len(by_call)
            for node_indices, our_index in zip(by_call.values(), targets, strict=True):
                for index in node_indices:
                    found[index] = (our_index, "decomposed")
            claimed.update(mine)

    # 3. op and order: by (op, original), then by op alone for originals we have no node of
    def pair_in_order(key_of_theirs: Callable[[int], Any], key_of_ours: Callable[[int], Any]) -> None:
        left: dict[Any, list[int]] = {}
        right: dict[Any, list[int]] = {}
        for index in range(len(theirs)):
            key = key_of_theirs(index)
            if index not in found and key is not None:
                left.setdefault(key, []).append(index)
        for i in range(len(ours)):
            if i not in claimed:
                right.setdefault(key_of_ours(i), []).append(i)
        for key, indices in left.items():
            mine = right.get(key, [])
            if len(mine) == len(indices):
                for index, our_index in zip(indices, mine, strict=True):
                    found[index] = (our_index, "op and order")
                    claimed.add(our_index)

    pair_in_order(lambda index: their_key[index], lambda i: our_key[i])
    pair_in_order(lambda index: None if their_key[index][1] in our_ops else their_key[index][0],
                  lambda i: our_key[i][0])

    return tuple(
        NodeMatch(node.name, node.graph, ours[found[index][0]].name if index in found else None,
                  found[index][1] if index in found else "unmatched")
        for index, node in enumerate(theirs)
    )
