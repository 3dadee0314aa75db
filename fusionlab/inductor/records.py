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

__all__ = [
    "CapturedNodes",
    "InductorDecision",
    "InductorKernel",
    "InductorView",
    "captured_pairs",
    "match_nodes",
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

    def kernel(self, name: str) -> InductorKernel:
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(f"no Inductor kernel named {name!r}: it has {', '.join(k.name for k in self.kernels)}")

    def kernels_of_node(self, node_name: str) -> tuple[str, ...]:
        """Names of the kernels that cover the captured aten node `node_name`."""
        return tuple(kernel.name for kernel in self.kernels if node_name in kernel.node_names)

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
            verdict = "fused" if decision.fused else f"not fused: {decision.reason}"
            lines.append(f"  {decision.node1} + {decision.node2}: {verdict}")
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
        decisions = "".join(
            f"<tr><td>{escape(d.node1)}</td><td>{escape(d.node2)}</td>"
            f"<td>{'fused' if d.fused else 'not fused'}</td><td>{escape(d.reason)}</td></tr>"
            for d in self.decisions
        )
        sources = "".join(
            f"<details><summary><code>{escape(k.name)}</code></summary><pre>{escape(k.source)}</pre></details>"
            for k in self.kernels
        )
        state = "generated, not run" if self.generated_only else "compiled and run"
        return (
            f"<div><b>TorchInductor on {escape(self.device)}</b> ({escape(state)}): "
            f"{len(self.kernels)} kernels, {self.launches} launches"
            "<table><tr><th>kernel</th><th>language</th><th>aten ops</th><th>captured nodes</th>"
            "<th>MB</th></tr>"
            f"{rows}</table>"
            "<table><tr><th>node 1</th><th>node 2</th><th>verdict</th><th>reason</th></tr>"
            f"{decisions}</table>{sources}</div>"
        )


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
    text = str(getattr(target, "_overloadpacket", target))
    for prefix in ("torch.ops.", "aten."):
        text = text.removeprefix(prefix)
    return text.split(".")[0]


def match_nodes(kernels: list[InductorKernel], captured: list[tuple[str, str]]) -> list[InductorKernel]:
    """Give each kernel the captured nodes whose op it lists, matching by op and order.

    For each op: n nodes and k kernels that list it. k == n pairs them in order; one node goes to every
    kernel that lists it (a layer_norm split over two kernels); one kernel takes every node; otherwise
    the nodes are spread over the kernels in order, proportionally. It is a heuristic: Inductor's comments
    name ops, not our nodes.
    """
    nodes_by_op: dict[str, list[str]] = {}
    for name, op in captured:
        nodes_by_op.setdefault(op, []).append(name)
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
