"""Checking fused results against eager PyTorch, and checking call-time inputs against the capture.

    >>> report = verify_outputs([torch.ones(3)], [torch.ones(3)])
    >>> report.ok
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.capture import CaptureResult

# (atol, rtol) per dtype, for fused vs eager. Eager rounds every intermediate to a half-precision dtype and a fused
# kernel keeps float32, so where values cancel the two differ by an ulp or two of the intermediates (a bfloat16 ulp
# at 2..4 is 0.0156). Every other dtype must match exactly.
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 2e-2), torch.float32: (1e-4, 1e-4),
              torch.float64: (1e-7, 1e-7)}


class InputMismatch(ValueError):
    """A call's inputs differ from the captured ones in rank, dtype, device or a fixed size."""


@dataclass(frozen=True)
class OutputError:
    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    max_abs_error: float
    max_rel_error: float
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    """Max abs/rel error per output of fused vs eager, on fresh random inputs."""

    outputs: tuple[OutputError, ...]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def __repr__(self) -> str:
        worst = max((o.max_abs_error for o in self.outputs), default=0.0)
        return f"VerifyReport(ok={self.ok}, {len(self.outputs)} outputs, max abs error {worst:.3g})"

    def as_text(self) -> str:
        rows = [f"output {o.index}: {str(o.dtype).removeprefix('torch.')}{list(o.shape)} max abs {o.max_abs_error:.3g}"
                f" max rel {o.max_rel_error:.3g} {'ok' if o.ok else 'MISMATCH'}" for o in self.outputs]
        return "\n".join(rows)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(repr(self))}\n{html.escape(self.as_text())}</pre>"


def verify_outputs(expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor]) -> VerifyReport:
    if len(expected) != len(actual):
        raise AssertionError(f"eager returned {len(expected)} outputs, fusionlab {len(actual)}")
    rows = []
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want.shape != got.shape or want.dtype != got.dtype:
            rows.append(OutputError(index, tuple(want.shape), want.dtype, float("inf"), float("inf"), False))
            continue
        a, b = want.detach().double().cpu(), got.detach().double().cpu()
        if a.numel() == 0:
            rows.append(OutputError(index, tuple(want.shape), want.dtype, 0.0, 0.0, True))
            continue
        same_nan = torch.isnan(a) == torch.isnan(b)
        diff = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(a), (a - b).abs())
        diff = torch.where(a == b, torch.zeros_like(a), diff)  # equal infinities
        scale = torch.nan_to_num(a.abs(), nan=0.0)  # NaN where both are NaN: already counted as equal
        rel = diff / scale.clamp_min(1e-12)
        atol, rtol = TOLERANCES.get(want.dtype, (0.0, 0.0))
        ok = bool(same_nan.all()) and bool((diff <= atol + rtol * scale).all())
        rows.append(OutputError(index, tuple(want.shape), want.dtype, float(diff.max()), float(rel.max()), ok))
    return VerifyReport(tuple(rows))


def random_like(tensor: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A fresh random tensor with the same shape, dtype, device and strides (never all zeros)."""
    # Expanded (stride-0) dimensions hold one value each: draw that one, then expand like the example.
    shape = tuple(1 if stride == 0 else size for size, stride in zip(tensor.shape, tensor.stride()))
    if tensor.dtype == torch.bool:
        fresh = torch.rand(shape, generator=generator) > 0.5
    elif tensor.dtype.is_floating_point:
        fresh = torch.randn(shape, generator=generator, dtype=torch.float32)
    else:
        fresh = torch.randint(1, 8, shape, generator=generator)
    out = torch.empty_strided(shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
    out.copy_(fresh.to(tensor.dtype))
    return out.expand(tensor.shape)


def random_like_inputs(args: tuple[Any, ...], kwargs: dict[str, Any],
                       seed: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return pytree.tree_map(lambda v: random_like(v, generator) if isinstance(v, torch.Tensor) else v, (args, kwargs))


def check_inputs(captured: CaptureResult, tensors: Sequence[torch.Tensor]) -> None:
    """Rank, dtype and device must match the capture; fixed sizes must match; symbolic ones must agree."""
    if len(tensors) != len(captured.inputs):
        raise InputMismatch(f"expected {len(captured.inputs)} tensors, got {len(tensors)}")
    values: dict[sympy.Symbol, int] = {}
    for binding in captured.symbols:
        values[binding.symbol] = int(tensors[binding.input_index].shape[binding.dim])
    for spec, tensor in zip(captured.inputs, tensors):
        expected = spec.type
        where = f"input {spec.name!r}"
        if not isinstance(tensor, torch.Tensor):
            raise InputMismatch(f"{where} is a {type(tensor).__name__}, expected a tensor")
        if tensor.dim() != expected.rank:
            raise InputMismatch(f"{where} has rank {tensor.dim()} (shape {tuple(tensor.shape)}); it was captured "
                                f"with rank {expected.rank} ({expected.text()}): explore again for this rank")
        if tensor.dtype != expected.dtype:
            raise InputMismatch(f"{where} is {tensor.dtype}; it was captured as {expected.dtype}: convert it "
                                f"(.to({expected.dtype})) or explore again")
        if torch.device(spec.device).type != tensor.device.type:
            raise InputMismatch(f"{where} is on {tensor.device}; it was captured on {spec.device}: move it or "
                                "explore again with inputs on that device")
        for dim, (size, want) in enumerate(zip(tensor.shape, expected.shape)):
            wanted = int(want.xreplace(values)) if isinstance(want, sympy.Expr) else int(want)
            if size != wanted:
                hint = ("use dynamic=True to vary the leading dimension" if not captured.symbols
                        else "only leading dimensions are dynamic")
                raise InputMismatch(f"{where} has size {size} in dimension {dim}; it was captured with "
                                    f"{expected.text()} (expecting {wanted}): {hint}, or explore again")
    for value in values.values():
        if value < 2:
            raise InputMismatch(f"a dynamic leading size of {value} is specialised away by tracing (sizes 0 and 1 "
                                "are fixed at capture): explore again with this size")
