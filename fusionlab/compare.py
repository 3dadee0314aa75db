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


def compare(want: torch.Tensor, got: torch.Tensor, index: int = 0, label: str = "") -> OutputError:
    """`got` against `want` within the tolerance of `want`'s dtype (NaN where `want` has NaN counts as equal)."""
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
    atol, rtol = TOLERANCES.get(want.dtype, (0.0, 0.0))
    ok = bool(same_nan.all()) and bool((diff <= atol + rtol * scale).all())
    return OutputError(index, shape, want.dtype, float(diff.max()), float(rel.max()), ok, label)
