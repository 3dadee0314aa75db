"""The kinds of fusion group: what a group's nodes make together, decided by one precedence.

    extern     holds an extern op: an eager PyTorch (or cuBLAS) call between kernels
    matmul     one 2-D product and its pointwise epilogue: a generated Triton matmul
    reduction  reductions with their pointwise prologue and epilogue: one kernel over rows
    pointwise  elementwise ops (and the index-only views between them): one kernel
    view       views alone: applied between kernels, no kernel and no bytes of their own

A group holding an extern op is an extern group whatever else it holds; otherwise a matmul decides, then a
reduction, then a pointwise op.

    >>> group_kind(["view", "pointwise", "reduction"])
    'reduction'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

GroupKind = Literal["extern", "matmul", "reduction", "pointwise", "view"]
GROUP_KINDS: tuple[GroupKind, ...] = get_args(GroupKind)  # in precedence order: the first one present decides
KERNEL_GROUP_KINDS: tuple[GroupKind, ...] = ("pointwise", "reduction", "matmul")  # groups that become kernels


def group_kind(node_kinds: Iterable[str]) -> GroupKind:
    """The kind of a group whose nodes have `node_kinds` (graph inputs' "input" count for nothing)."""
    present = set(node_kinds)
    return next((kind for kind in GROUP_KINDS if kind in present), "view")
