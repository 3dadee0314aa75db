"""The module table: one row per module of the model, in tree order, with its kernels, bytes and times.

Every figure of a row covers the module and everything under it (a layer's time includes its attention's).
Kernels belong to the module their fusion group's nodes share (`FusionGroup.module`); times come from
`fusionlab.profile.eager` (eager), `fusionlab.profile.inductor_times` (Inductor) and the kernel records
(fusionlab, measured on CUDA, modelled on a CPU). A spread is the fastest and slowest of the rounds.

    >>> rows = module_rows(model, kernels=records, eager=eager_per_round)
    >>> rows[0]["module"], rows[0]["eager_ms"]
    ('', 1.9)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from fusionlab.profile.kernels import KernelRecord
from fusionlab.profile.records import Spread

__all__ = ["MODULE_COLUMNS", "fusionlab_columns", "inclusive", "module_rows", "under"]

MODULE_COLUMNS = (
    "module", "type", "depth", "kernels", "externs", "bytes", "fusionlab_ms", "fusionlab_timing",
    "eager_ms", "eager_low_ms", "eager_high_ms", "inductor_ms", "inductor_low_ms", "inductor_high_ms",
    "host_ms", "gpu_ms", "rounds",
)


def under(path: str, ancestor: str) -> bool:
    """Whether module `path` is `ancestor` or inside it ("" is the model and holds every module)."""
    return ancestor == "" or path == ancestor or path.startswith(ancestor + ".")


def inclusive(own: Mapping[str, float], paths: Iterable[str]) -> dict[str, float]:
    """Each path's value summed with every path under it."""
    return {path: sum(value for key, value in own.items() if under(key, path)) for path in paths}


def _called(values: Mapping[str, float], path: str) -> float | None:
    """A module's inclusive time in one round; a container never called itself (a ModuleList) is the sum of its
    outermost called modules."""
    if path in values:
        return values[path]
    inner = [k for k in values if under(k, path) and k != path]
    outermost = [k for k in inner if not any(other != k and under(k, other) for other in inner)]
    return sum(values[k] for k in outermost) if outermost else None


def _spread(per_round: Sequence[Mapping[str, float]], path: str, *, own: bool) -> Spread | None:
    if not per_round:
        return None
    values = [sum(v for k, v in r.items() if under(k, path)) if own else _called(r, path) for r in per_round]
    present = [v for v in values if v is not None]
    return Spread.of(present) if present else None


def fusionlab_columns(path: str, kernels: Sequence[KernelRecord], unmatched_ms: float = 0.0) -> dict[str, Any]:
    """A module's kernels, externs, bytes and fusionlab time (the kernels under it, and `unmatched_ms`: GPU time
    that matched no launch, which only the model's row holds)."""
    mine = [r for r in kernels if under(r.module, path)]
    timed = [r.time_us for r in mine if r.time_us is not None]
    externs = sum(1 for r in mine if r.kind == "extern")
    milliseconds = sum(timed) / 1e3 + unmatched_ms if timed or unmatched_ms else None
    return {"kernels": len(mine) - externs, "externs": externs,
            "bytes": sum(r.bytes for r in mine), "fusionlab_ms": milliseconds}


def module_rows(model: torch.nn.Module, *, kernels: Sequence[KernelRecord], fusionlab_timing: str,
                eager: Sequence[Mapping[str, float]] = (), inductor: Sequence[Mapping[str, float]] = (),
                host: Mapping[str, float] | None = None, gpu: Mapping[str, float] | None = None,
                inductor_by_module: bool = True, unmatched_ms: float = 0.0) -> list[dict[str, Any]]:
    """The rows of `ModelProfile.modules`. `eager` holds each round's inclusive ms per module; `inductor` each
    round's ms of each module's own kernels; `host` and `gpu` eager's inclusive host and GPU ms (GPU: CUDA only).
    `inductor_by_module=False` gives Inductor's figure to the model's row only (the rest are None: not known);
    `unmatched_ms`, fusionlab's GPU time that matched no launch, counts in the model's row.
    """
    types = {path: type(module).__name__ for path, module in model.named_modules()}
    for record in kernels:  # a module only the kernels name (a path the model does not list): keep it
        types.setdefault(record.module, "")
    rows = []
    for path, kind in types.items():
        eager_spread = _spread(eager, path, own=False)
        inductor_spread = _spread(inductor, path, own=True) if inductor_by_module or path == "" else None
        ours = fusionlab_columns(path, kernels, unmatched_ms if path == "" else 0.0)
        rows.append({
            "module": path, "type": kind, "depth": 0 if path == "" else path.count(".") + 1,
            **ours, "fusionlab_timing": fusionlab_timing,
            "eager_ms": eager_spread.median if eager_spread else None,
            "eager_low_ms": eager_spread.low if eager_spread else None,
            "eager_high_ms": eager_spread.high if eager_spread else None,
            "inductor_ms": inductor_spread.median if inductor_spread else None,
            "inductor_low_ms": inductor_spread.low if inductor_spread else None,
            "inductor_high_ms": inductor_spread.high if inductor_spread else None,
            "host_ms": (host or {}).get(path), "gpu_ms": (gpu or {}).get(path),
            "rounds": max(len(eager), len(inductor)),
        })
    return rows
