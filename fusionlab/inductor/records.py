"""Inductor's program as records: its kernels, its fusion decisions, and how they cover our captured graph.

Plain data, filled in by `fusionlab.inductor` (the adapter that talks to Inductor); rendered as text and
HTML. Example: `view.kernels[0].aten_ops`, `view.kernels_of_node("add")`, `view.decisions[0].reason`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fusionlab.inductor.matching import NodeMatch, OurNode, functional, op_name

__all__ = [
    "CapturedNodes",
    "InductorDecision",
    "InductorKernel",
    "InductorOperation",
    "InductorView",
    "captured_nodes",
    "captured_pairs",
    "match_nodes",
    "split_decorator",
]

CapturedNodes = Mapping[str, str] | Iterable[Any]


@dataclass(frozen=True)
class InductorKernel:
    """One kernel (or extern call) of Inductor's program, with the aten ops and captured nodes it covers.

    `language` is "triton", "cpp" or "extern" (a library call such as cuBLAS's mm). `num_gb` and `flops`
    are Inductor's own counts (`kernel_num_gb`, `kernel_flop`), present for Triton kernels only.
    Example: `InductorKernel("triton_poi_fused_add_0", src, "triton", ("add",), ("add",), 0.4, 0)`.
    """

    name: str
    source: str
    language: str
    aten_ops: tuple[str, ...]
    node_names: tuple[str, ...]
    num_gb: float | None
    flops: int | None
    scheduler_nodes: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()  # nodes of Inductor's graph in this kernel that match none of ours
    buffers: tuple[str, ...] = ()  # the buffers its first launch names (inputs and outputs)

    @property
    def decorator(self) -> str:
        """The `@triton_heuristics...(triton_meta=..., inductor_meta=...)` block before `@triton.jit`; "" if none."""
        return split_decorator(self.source)[0]

    @property
    def body(self) -> str:
        """The kernel from `@triton.jit` on (the whole source for C++ and extern calls)."""
        return split_decorator(self.source)[1] if self.language == "triton" else self.source

    @property
    def bytes_moved(self) -> int | None:
        """Inductor's count of bytes read plus written, or None where it gives none."""
        return None if self.num_gb is None else round(self.num_gb * 1e9)


@dataclass(frozen=True)
class InductorDecision:
    """One pair of Inductor scheduler nodes it considered: fused, or not and why.

    Example: `InductorDecision("op0", "op4", "no shared data")`.
    """

    node1: str
    node2: str
    reason: str
    fused: bool = False
    graph: int = 0  # which of Inductor's graphs (a graph break makes several; each numbers its ops from op0)


@dataclass(frozen=True)
class InductorOperation:
    """One scheduler node of Inductor ("op3"): the buffers it writes, the nodes of Inductor's graph it computes
    (`origins`), and the aten nodes of our captured graph they match (`nodes`; `unmatched`: origins with none).

    Example: `InductorOperation("op3", "SchedulerNode", ("buf3",), ("add_1", "relu"), ("add_1", "relu"), ())`.
    """

    name: str
    kind: str
    buffers: tuple[str, ...]
    origins: tuple[str, ...]
    nodes: tuple[str, ...]
    unmatched: tuple[str, ...] = ()
    graph: int = 0


@dataclass(frozen=True)
class InductorView:
    """What torch.compile made of a function: kernels in launch order, fusion decisions, the wrapper.

    `generated_only` is True when the code was generated but not run (Triton source on a CPU).
    Example: `inductor_view(fn, inputs).kernels[0].source`.
    """

    kernels: tuple[InductorKernel, ...]
    decisions: tuple[InductorDecision, ...]
    wrapper_source: str
    device: str
    launches: int = 0
    generated_only: bool = False
    operations: tuple[InductorOperation, ...] = ()  # empty when this torch gave no scheduler hook
    matches: tuple[NodeMatch, ...] = ()  # each node of Inductor's graph: our node and the rule, or unmatched

    def kernel(self, name: str) -> InductorKernel:
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(f"no Inductor kernel named {name!r}: it has {', '.join(k.name for k in self.kernels)}")

    def kernels_of_node(self, node_name: str) -> tuple[str, ...]:
        """Names of the kernels that cover the captured aten node `node_name`."""
        return tuple(kernel.name for kernel in self.kernels if node_name in kernel.node_names)

    def operations_of(self, scheduler_name: str, graph: int = 0) -> tuple[InductorOperation, ...]:
        """The operations in a scheduler node's name: "op3", or a fused node's "op3_op4" (Inductor joins them)."""
        known = {(op.graph, op.name.split("@")[0]): op for op in self.operations}
        names = re.findall(r"op\d+", scheduler_name)
        return tuple(known[(graph, name)] for name in names if (graph, name) in known)

    def our_nodes_of(self, scheduler_name: str, graph: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(our aten nodes, Inductor's unmatched nodes) that a scheduler node computes, each in order, no repeats."""
        operations = self.operations_of(scheduler_name, graph)
        ours = tuple(dict.fromkeys(name for op in operations for name in op.nodes))
        unmatched = tuple(dict.fromkeys(name for op in operations for name in op.unmatched))
        return ours, unmatched

    def describe(self, decision: InductorDecision, group_of: Mapping[str, str] | None = None) -> str:
        """A decision in our names: `add_1, relu (our group pointwise_3) + mean (...) | not fused: why [op3 + op6]`.

        `group_of` maps our aten nodes to our fusion groups (`fusionlab.inductor.correspondence.group_labels`).
        """
        verdict = "fused" if decision.fused else f"not fused: {decision.reason}"
        sides = " + ".join(self._side(name, decision.graph, group_of) for name in (decision.node1, decision.node2))
        graph = f" in graph {decision.graph}" if decision.graph else ""
        return f"{sides} | {verdict}  [Inductor's {decision.node1} + {decision.node2}{graph}]"

    def _side(self, scheduler_name: str, graph: int, group_of: Mapping[str, str] | None) -> str:
        if not self.operations_of(scheduler_name, graph):
            return f"{scheduler_name} (not recorded)"
        ours, unmatched = self.our_nodes_of(scheduler_name, graph)
        parts = []
        if ours:
            shown = ", ".join(ours[:4]) + (f" +{len(ours) - 4} more" if len(ours) > 4 else "")
            groups = list(dict.fromkeys(group_of[n] for n in ours if group_of and n in group_of))
            where = f" (our group{'s' if len(groups) > 1 else ''} {', '.join(groups)})" if groups else ""
            parts.append(shown + where)
        if unmatched:
            parts.append(f"unmatched: Inductor's {', '.join(unmatched[:3])}" + (" ..." if len(unmatched) > 3 else ""))
        return "; ".join(parts)

    def summary(self) -> str:
        state = "generated, not run" if self.generated_only else "compiled and run"
        lines = [
            f"# Inductor on {self.device} ({state}): {len(self.kernels)} kernels, {self.launches} launches, "
            f"{sum(not d.fused for d in self.decisions)} fusions declined"
        ]
        for kernel in self.kernels:
            size = "" if kernel.num_gb is None else f"; {kernel.num_gb * 1e3:.3f} MB"
            nodes = f"; nodes {', '.join(kernel.node_names)}" if kernel.node_names else ""
            ops = ", ".join(kernel.aten_ops) or "?"
            lines.append(f"{kernel.name} ({kernel.language}): aten {ops}{nodes}{size}")
        for decision in self.decisions:
            if self.operations:
                lines.append(f"  {self.describe(decision)}")
            else:
                verdict = "fused" if decision.fused else f"not fused: {decision.reason}"
                lines.append(f"  {decision.node1} + {decision.node2}: {verdict}")
        unmatched = [m.inductor for m in self.matches if m.ours is None]
        if unmatched:
            lines.append(f"# unmatched (no rule pairs them with our nodes): {', '.join(unmatched)}")
        return "\n".join(lines)

    def as_text(self) -> str:
        """The summary, then every kernel's source."""
        parts = [self.summary()]
        for kernel in self.kernels:
            parts.append(f"# ---- {kernel.name} ({kernel.language})\n{kernel.source.rstrip()}")
        return "\n\n".join(parts) + "\n"

    def __repr__(self) -> str:
        names = ", ".join(kernel.name for kernel in self.kernels[:4])
        more = ", ..." if len(self.kernels) > 4 else ""
        return (
            f"InductorView({self.device}: {len(self.kernels)} kernels [{names}{more}], "
            f"{len(self.decisions)} decisions)"
        )

    def _repr_html_(self) -> str:
        escape = html.escape
        rows = "".join(
            "<tr>"
            f"<td><code>{escape(k.name)}</code></td><td>{escape(k.language)}</td>"
            f"<td>{escape(', '.join(k.aten_ops))}</td><td>{escape(', '.join(k.node_names))}</td>"
            f"<td>{'' if k.num_gb is None else escape(f'{k.num_gb * 1e3:.3f}')}</td>"
            "</tr>"
            for k in self.kernels
        )
        decisions = self.decisions_html()
        sources = "".join(
            f"<details><summary><code>{escape(k.name)}</code></summary><pre>{escape(k.body)}</pre>"
            + (f"<details><summary>decorator: {k.decorator.count(chr(10)) + 1} lines (show)</summary>"
               f"<pre>{escape(k.decorator)}</pre></details>" if k.decorator else "")
            + "</details>"
            for k in self.kernels
        )
        state = "generated, not run" if self.generated_only else "compiled and run"
        return (
            f"<div><b>TorchInductor on {escape(self.device)}</b> ({escape(state)}): "
            f"{len(self.kernels)} kernels, {self.launches} launches"
            "<table><tr><th>kernel</th><th>language</th><th>aten ops</th><th>captured nodes</th>"
            "<th>MB</th></tr>"
            f"{rows}</table>{decisions}{sources}</div>"
        )

    def decisions_html(self, group_of: Mapping[str, str] | None = None, max_height: str = "") -> str:
        """Inductor's decisions in our node names (and groups, given `group_of`), its opN in small print."""
        escape = html.escape
        rows = []
        for d in self.decisions:
            sides = [escape(self._side(name, d.graph, group_of)) if self.operations else escape(name)
                     for name in (d.node1, d.node2)]
            where = f" (graph {d.graph})" if d.graph else ""
            small = f"<br><small style='color:#6b7280'>Inductor's {escape(d.node1)} + {escape(d.node2)}{where}</small>"
            verdict = "fused" if d.fused else "not fused"
            rows.append(f"<tr><td>{sides[0]}</td><td>{sides[1]}{small if self.operations else ''}</td>"
                        f"<td>{verdict}</td><td>{escape(d.reason)}</td></tr>")
        unmatched = [m.inductor for m in self.matches if m.ours is None]
        note = (f"<div style='font-size:11px;color:#6b7280'>unmatched (no rule pairs them with our nodes): "
                f"{escape(', '.join(unmatched))}</div>" if unmatched else "")
        table = ("<table><caption style='text-align:left;font-weight:600;font-size:12px'>Inductor's fusion "
                 "decisions, in our node names</caption><tr><th>our nodes (1)</th><th>our nodes (2)</th>"
                 f"<th>verdict</th><th>reason</th></tr>{''.join(rows)}</table>{note}")
        return f"<div style='max-height:{max_height};overflow:auto'>{table}</div>" if max_height else table


# ---- matching kernels onto the captured graph -----------------------------------------------------------


def captured_pairs(captured: CapturedNodes) -> list[tuple[str, str]]:
    """(node name, aten op) pairs in graph order, from any of the forms `inductor_view` accepts."""
    if isinstance(captured, Mapping):
        return [(str(name), _op_of_target(target)) for name, target in captured.items()]
    pairs = []
    for item in captured:
        if isinstance(item, str):
            pairs.append((item, re.sub(r"_\d+$", "", item)))
        elif hasattr(item, "name") and hasattr(item, "target"):
            pairs.append((str(item.name), _op_of_target(item.target)))
        else:
            raise TypeError(
                f"captured_node_names holds {item!r}: give node names, a {{name: aten target}} mapping, "
                "or objects with .name and .target (such as Captured.aten_nodes)"
            )
    return pairs


def _op_of_target(target: Any) -> str:
    """`aten.add.Tensor`, `torch.ops.aten.add.Tensor` or the OpOverload itself -> "add"."""
    return op_name(target)


def captured_nodes(captured: CapturedNodes) -> list[OurNode]:
    """Our aten nodes with the op a capture decomposition replaced (`AtenNode.decomposed_from`), for matching."""
    items = list(captured) if not isinstance(captured, Mapping) else None
    pairs = captured_pairs(captured if items is None else items)
    originals = [getattr(item, "decomposed_from", None) for item in items] if items is not None else [None] * len(pairs)
    return [OurNode(name, op, op_name(original) if original else op)
            for (name, op), original in zip(pairs, originals, strict=True)]


def split_decorator(source: str) -> tuple[str, str]:
    """(decorator block, kernel) of a Triton kernel: Inductor's `@triton_heuristics...(...)` block before
    `@triton.jit`, and the kernel from `@triton.jit` on. No such block: ("", the source from its first `@`)."""
    lines = source.splitlines()
    jit = next((i for i, line in enumerate(lines) if line.startswith("@triton.jit")), None)
    first = next((i for i, line in enumerate(lines) if line.startswith("@")), None)
    if jit is None or first is None:
        start = first if first is not None else 0
        return "", "\n".join(lines[start:]).rstrip() + "\n"
    decorator = "\n".join(lines[first:jit]).rstrip()
    return (decorator + "\n" if decorator else ""), "\n".join(lines[jit:]).rstrip() + "\n"


def match_nodes(kernels: list[InductorKernel], captured: list[tuple[str, str]]) -> list[InductorKernel]:
    """Give each kernel the captured nodes whose op it lists, matching by op and order.

    For each op: n nodes and k kernels that list it. k == n pairs them in order; one node goes to every
    kernel that lists it (a layer_norm split over two kernels); one kernel takes every node; otherwise
    the nodes are spread over the kernels in order, proportionally. It is a heuristic: Inductor's comments
    name ops, not our nodes.
    """
    nodes_by_op: dict[str, list[str]] = {}
    for name, op in captured:  # Inductor's graph is functionalized: our in-place relu_ is its relu
        nodes_by_op.setdefault(functional(op), []).append(name)
    assigned: dict[int, set[str]] = {index: set() for index in range(len(kernels))}
    for op, nodes in nodes_by_op.items():
        holders = [index for index, kernel in enumerate(kernels) if op in kernel.aten_ops]
        if not holders:
            continue
        if len(nodes) == 1 or len(holders) == 1:
            for index in holders:
                assigned[index].update(nodes)
        elif len(holders) >= len(nodes):
            for position, index in enumerate(holders):
                assigned[index].add(nodes[position * len(nodes) // len(holders)])
        else:
            for position, node in enumerate(nodes):
                assigned[holders[position * len(holders) // len(nodes)]].add(node)
    order = {name: position for position, (name, _) in enumerate(captured)}
    return [
        replace(kernel, node_names=tuple(sorted(assigned[index], key=order.__getitem__)))
        for index, kernel in enumerate(kernels)
    ]
