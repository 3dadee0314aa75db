"""One value against eager's: the tolerance of each dtype and the error of each compared value.

    >>> compare(torch.ones(3), torch.ones(3)).ok
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (atol, rtol) per dtype, for fused vs eager. Eager rounds every intermediate to a half-precision dtype and a fused
# kernel keeps float32, so where values cancel the two differ by an ulp or two of the intermediates (a bfloat16 ulp
# at 2..4 is 0.0156). Every other dtype must match exactly.
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 2e-2), torch.float32: (1e-4, 1e-4),
              torch.float64: (1e-7, 1e-7)}



@dataclass(frozen=True)
class OutputError:
    """One compared value: an output of the call, or an input or buffer after it (`label` names which)."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    max_abs_error: float
    max_rel_error: float
    ok: bool
    label: str = ""

    @property
    def title(self) -> str:
        return self.label or f"output {self.index}"


LOOSEST_FIRST = (torch.bfloat16, torch.float16, torch.float32, torch.float64)  # floating dtypes, by tolerance
# aten ops that read only their operands' shapes and dtypes
_SHAPE_ONLY = frozenset(getattr(torch.ops.aten, name) for name in (
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "new_zeros", "new_ones",
    "new_empty", "new_full", "sym_size", "sym_numel", "sym_stride", "zero", "fill") if hasattr(torch.ops.aten, name))


def tolerance(dtype: torch.dtype, through: torch.dtype | None = None) -> tuple[float, float]:
    """(atol, rtol) for a value of `dtype` computed through values of the floating dtype `through` (a float32 output
    of a bfloat16 chain, a float64 cast of a float32 layer norm): the looser of the two, since eager rounds every
    intermediate to `through` and a fused kernel keeps float32, and their ops' float32 differs by an ulp."""
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    if through is not None and dtype.is_floating_point:
        wider = TOLERANCES.get(through, (0.0, 0.0))
        atol, rtol = max(atol, wider[0]), max(rtol, wider[1])
    return atol, rtol


def computed_through(graph_module: torch.fx.GraphModule) -> list[torch.dtype | None]:
    """Per output of an aten graph (its output node's leaves, in order), the loosest floating dtype among the values
    it is computed from, itself included; None where none is floating."""
    through: dict[str, torch.dtype | None] = {}
    for node in graph_module.graph.nodes:
        produced = [v.dtype for v in torch.utils._pytree.tree_leaves(node.meta.get("val"))
                    if isinstance(v, torch.Tensor)]
        # a comparison's, an index's or a count's value carries no rounding error on (it is exact, or wrong), and
        # an op that reads only its operands' shapes (zeros_like) none of theirs
        carries = any(d.is_floating_point for d in produced) and getattr(node.target, "overloadpacket",
                                                                           None) not in _SHAPE_ONLY
        sources = node.all_input_nodes[1:2] if getattr(node.target, "overloadpacket", None) is torch.ops.aten.copy \
            else node.all_input_nodes  # copy(dst, src) keeps only src's values
        found = [through.get(a.name) for a in sources] if carries else []
        found += produced
        through[node.name] = next((d for d in LOOSEST_FIRST if d in found), None)
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    return [through.get(leaf.name) if isinstance(leaf, torch.fx.Node) else None
            for leaf in torch.utils._pytree.tree_leaves(output.args[0])]


def loosest_float_in(graph_module: torch.fx.GraphModule) -> torch.dtype | None:
    """The loosest floating dtype of any value in an aten graph (None if it has none)."""
    found = {v.dtype for node in graph_module.graph.nodes
             for v in torch.utils._pytree.tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)}
    return next((d for d in LOOSEST_FIRST if d in found), None)


def compare(want: torch.Tensor, got: torch.Tensor, index: int = 0, label: str = "",
            through: torch.dtype | None = None) -> OutputError:
    """`got` against `want` within the tolerance of `want`'s dtype, or of the floating dtype `through` it was
    computed from where that is looser (NaN where `want` has NaN counts as equal)."""
    shape = tuple(want.shape)
    if want.shape != got.shape or want.dtype != got.dtype:
        return OutputError(index, shape, want.dtype, float("inf"), float("inf"), False, label)
    a, b = want.detach().double().cpu(), got.detach().double().cpu()
    if a.numel() == 0:
        return OutputError(index, shape, want.dtype, 0.0, 0.0, True, label)
    same_nan = torch.isnan(a) == torch.isnan(b)
    diff = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(a), (a - b).abs())
    diff = torch.where(a == b, torch.zeros_like(a), diff)  # equal infinities
    scale = torch.nan_to_num(a.abs(), nan=0.0)  # NaN where both are NaN: already counted as equal
    rel = diff / scale.clamp_min(1e-12)
    atol, rtol = tolerance(want.dtype, through)
    ok = bool(same_nan.all()) and bool((diff <= atol + rtol * scale).all())
    return OutputError(index, shape, want.dtype, float(diff.max()), float(rel.max()), ok, label)
