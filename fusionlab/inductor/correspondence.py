"""Our fusion groups beside Inductor's kernels: which of its kernels cover the aten nodes of which of our groups.

The matching of Inductor's graph onto ours (`fusionlab.inductor.matching`) names our aten nodes in every Inductor
kernel and decision; through `FusionGroup.origins` they name our groups too. A pair is one of our groups and the
Inductor kernels covering its aten nodes, like with like (a generated kernel with generated kernels, an extern
call with extern calls), most shared nodes first; where there is none, `reason` says why.

    >>> pair = pair_for(ex.fused, view, ex.fused.kernels[0].name)
    >>> pair.inductor, pair.shared, pair.reason
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fusionlab.fusion.fuse import FusionGroup
from fusionlab.inductor.records import InductorKernel, InductorView
from fusionlab.stages import Fused

__all__ = ["KernelPair", "group_labels", "kernel_pairs", "pair_for", "short_label"]


@dataclass(frozen=True)
class KernelPair:
    """Our group `group` and the Inductor kernels over the same aten nodes (`inductor`, best first).

    `shared`: the aten nodes both cover; `others`: Inductor kernels of the other kind over them (the layout copies
    around an extern convolution, say); `reason`: why `inductor` is empty, else "".
    Example: `KernelPair("pointwise_1_add_relu", ("triton_poi_fused_add_relu_0",), ("add", "relu"), (), "")`.
    """

    group: str
    inductor: tuple[str, ...]
    shared: tuple[str, ...]
    others: tuple[str, ...] = ()
    reason: str = ""


def short_label(group_name: str) -> str:
    """`pointwise_3_add_relu` -> `pointwise_3`: the kind and number that open every group's name."""
    match = re.match(r"^[a-z]+_\d+", group_name)
    return match.group(0) if match else group_name


def group_labels(fused: Fused) -> dict[str, str]:
    """Each captured aten node -> the short label of our group computing it (a kernel or extern call before a
    view-only group that merely covers it)."""
    labels: dict[str, str] = {}
    for group in sorted(fused.groups, key=lambda g: not g.is_kernel and g.kind != "extern"):
        for origin in group.origins:
            labels.setdefault(origin, short_label(group.name))
    return labels


def _same_kind(group: FusionGroup, kernel: InductorKernel) -> bool:
    return (group.kind == "extern") == (kernel.language == "extern")


def pair_for(fused: Fused, view: InductorView, group_name: str) -> KernelPair:
    """The pair for our group `group_name` (see the module docstring)."""
    group = next((g for g in fused.groups if g.name == group_name), None)
    if group is None:
        raise KeyError(f"no group named {group_name!r} in this Fused stage: it has "
                       f"{', '.join(g.name for g in fused.groups[:8])}{' ...' if len(fused.groups) > 8 else ''}")
    origins = set(group.origins)
    scored = []
    for order, kernel in enumerate(view.kernels):
        common = origins & set(kernel.node_names)
        if common:
            scored.append((-len(common), order, kernel))
    scored.sort(key=lambda item: item[:2])
    alike = tuple(k.name for _, _, k in scored if _same_kind(group, k))
    others = tuple(k.name for _, _, k in scored if not _same_kind(group, k))
    shared = tuple(n for n in group.origins if any(n in k.node_names for _, _, k in scored))
    return KernelPair(group.name, alike, shared, others, "" if alike else _reason(group, view, others))


def kernel_pairs(fused: Fused, view: InductorView) -> tuple[KernelPair, ...]:
    """A pair for every group that is a kernel or an extern call (views have no kernel of their own)."""
    return tuple(pair_for(fused, view, g.name) for g in fused.groups if g.kind != "view")


def _reason(group: FusionGroup, view: InductorView, others: tuple[str, ...]) -> str:
    nodes = ", ".join(group.origins) or "(none)"
    if others:
        what = "an extern call" if group.kind == "extern" else "a generated kernel"
        return (f"Inductor covers the aten nodes {nodes} only with {', '.join(others)}, not with {what}: "
                "nothing alike to compare")
    matched = {m.ours for m in view.matches if m.ours}
    if view.matches and not matched & set(group.origins):
        unmatched = [m.inductor for m in view.matches if m.ours is None]
        extra = f"; Inductor's nodes left unmatched: {', '.join(unmatched[:8])}" if unmatched else ""
        return (f"no node of Inductor's graph matches the aten nodes {nodes} (Inductor folds views, copies and "
                f"factories into the kernels that read them, or drops them){extra}")
    if not view.matches:
        return (f"no Inductor kernel lists the aten nodes {nodes} (this torch records no scheduler operations: "
                "matched by op names only)")
    return f"no Inductor kernel covers the aten nodes {nodes}"
