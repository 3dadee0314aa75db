"""Split reductions: a reduction whose kernel would run as too few programs to fill a GPU is written as two.

A reduction keeps `kept` values and reduces `reduced` elements into each. Its kernel runs one program per kept row
(a reduction over trailing axes) or per 16-32 kept columns (over leading axes: codegen/plan.py's
`outer_reduction`). Batch norm's statistics over (N, H, W) of an NCHW activation keep 64 channels and reduce 100k
elements into each: 4 programs on a GPU of 132 SMs, 12 ms on an H200 for what reads in 15 µs (ResNet-50's
training step, docs/PERFORMANCE.md). Split, the first reduction reduces part of the elements into many partial
values (`sum_partial` over (H, W): N x C rows) and the second reduces those (over N), as Inductor's split
reductions do. A reduction over leading axes only, or trailing axes only, splits when its kernel would run fewer
than MIN_PROGRAMS programs, each reading at least MIN_PROGRAM_ELEMENTS elements; one over both (batch norm's) splits
from MIN_MIXED_ELEMENTS elements. The rule depends on shapes alone, so a program has one graph on every device.

    >>> plan_split((32, 64, 112, 112), (0, 2, 3), "sum")
    SplitPlan(shape=(32, 64, 112, 112), first=(2, 3), second=(0,))
    >>> plan_split((4096, 768), (0,), "sum") is None  # 24 programs, but each reduces only 4096 rows
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Ops whose result over a union is the same op over the parts' results (a mean: parts of equal size).
SPLITTABLE = frozenset({"sum", "mean", "prod", "amax", "amin"})
MIN_PROGRAM_ELEMENTS = 1 << 18  # elements each program reads: below this, the programs finish quickly anyway
MIN_MIXED_ELEMENTS = 1 << 17  # a reduction over leading and trailing axes (NCHW over N, H, W) of this many splits
MIN_TRAILING = 16  # the trailing axes' elements in a mixed reduction: fewer, and the first reduction is a copy
MIN_PROGRAMS = 128  # a split pays when the kernel would run fewer programs than a GPU has SMs (132 on an H200)
TARGET_PROGRAMS = 256  # what the first reduction aims for
MIN_PARTIAL = 1024  # elements each of the first reduction's values still reduces


@dataclass(frozen=True)
class SplitPlan:
    """The input viewed as `shape`; the first reduction over `first`, then the second over `second` (both axes
    of `shape`, both keeping their dimensions; the result is then reshaped to the reduction's own shape)."""

    shape: tuple[int, ...]
    first: tuple[int, ...]
    second: tuple[int, ...]


def programs(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    """About how many programs the reduction's kernel runs (as runtime/config.py sizes its blocks)."""
    kept = math.prod(d for i, d in enumerate(shape) if i not in axes)
    if axes == tuple(range(len(shape) - len(axes), len(shape))):
        return kept  # a reduction over trailing axes: one program per long row
    return -(-kept // (32 if kept >= 4096 else 16))  # over leading axes: 16 or 32 columns per program


def plan_split(shape: tuple[int, ...], axes: tuple[int, ...], op: str) -> SplitPlan | None:
    """How to split the reduction of `shape` over `axes` (sorted), or None when one kernel is right."""
    if op not in SPLITTABLE or not axes or 0 in shape:
        return None
    reduced = math.prod(shape[a] for a in axes)
    rank = len(shape)
    trailing = tuple(a for a in axes if all(b in axes for b in range(a, rank)))
    outer = tuple(a for a in axes if a not in trailing)
    count = programs(shape, axes)
    narrow = count < MIN_PROGRAMS and math.prod(shape) // count >= MIN_PROGRAM_ELEMENTS
    if trailing and outer and math.prod(shape[a] for a in trailing) >= MIN_TRAILING:
        # (N, H, W) of NCHW: (H, W) first, into N x C partial values. Past MIN_MIXED_ELEMENTS whatever the channel
        # count: one kernel walks each channel's elements with two integer divisions per element, and batch norm's
        # backward over [32, 1024, 14, 14] took 0.58 ms for 13 MB in 64 programs on an H200.
        return SplitPlan(shape, trailing, outer) if narrow or math.prod(shape) >= MIN_MIXED_ELEMENTS else None
    if not narrow:
        return None
    if not outer:  # trailing axes only: their elements as [s, reduced / s], the inner part first
        kept = shape[:rank - len(axes)]
        s = _parts(reduced, lambda s: programs(kept + (s, reduced // s), (len(kept) + 1,)))
        return None if s is None else SplitPlan(kept + (s, reduced // s), (len(kept) + 1,), (len(kept),))
    # Leading axes only (a column sum of a tall matrix): the first reduced axis as [s, size / s].
    first = axes[0]

    def split_shape(s: int) -> tuple[int, ...]:
        return shape[:first] + (s, shape[first] // s) + shape[first + 1:]

    inner = (first + 1,) + tuple(a + 1 for a in axes[1:])
    s = _parts(shape[first], lambda s: programs(split_shape(s), inner), reduced)
    if s is not None:
        return SplitPlan(split_shape(s), inner, (first,))
    if (len(axes) > 1 and programs(shape, axes[1:]) > programs(shape, axes)
            and math.prod(shape[a] for a in axes[1:]) >= MIN_PARTIAL):
        return SplitPlan(shape, axes[1:], (first,))
    return None


def _parts(size: int, programs_of, reduced: int | None = None) -> int | None:
    """The number of parts `s` to cut `size` into: the fewest that give TARGET_PROGRAMS programs, else the most
    that leave each part MIN_PARTIAL elements; None when no cut helps."""
    reduced = reduced or size
    divisors = sorted(d for k in range(1, math.isqrt(size) + 1) if size % k == 0 for d in (k, size // k))
    usable = [s for s in dict.fromkeys(divisors) if 1 < s and reduced // s >= MIN_PARTIAL]
    for s in usable:
        if programs_of(s) >= TARGET_PROGRAMS:
            return s
    return usable[-1] if usable else None
