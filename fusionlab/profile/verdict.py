"""Host-bound or GPU-bound: a graph's verdict from its kernels on a timeline, measured or modelled.

A GPU that waits between kernels is host-bound (launches cost more than the kernels run); one that runs kernels
back to back is GPU-bound. The verdict reads the gaps: the busy share of the span from the first kernel's start to
the last one's end, and the median gap between two kernels.

    >>> str(verdict_of([(0.0, 1.0), (5.0, 6.0)], modelled=True, device="H200"))
    'host-bound: GPU idle 67% between launches (median gap 4 µs), 2 launches, modelled on H200'
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fusionlab.profile.records import Verdict

__all__ = ["HOST_BOUND_IDLE", "busy_time", "verdict_of"]

#: a graph whose GPU is idle for more than this share of its span is host-bound
HOST_BOUND_IDLE = 0.5


def busy_time(intervals: Sequence[tuple[float, float]]) -> float:
    """The time covered by the union of (start, end) intervals (kernels on several streams may overlap)."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return covered


def verdict_of(intervals: Sequence[tuple[float, float]], *, modelled: bool, device: str) -> Verdict:
    """The verdict of kernels that ran over `intervals` (start, end in µs), in launch order."""
    if not intervals:
        return Verdict("host-bound", 0.0, 0.0, 0, modelled, device)
    ordered = sorted(intervals)
    span = max(end for _, end in ordered) - ordered[0][0]
    busy = busy_time(ordered) / span if span > 0 else 1.0
    reach = ordered[0][1]
    gaps = []
    for start, end in ordered[1:]:
        gaps.append(max(0.0, start - reach))
        reach = max(reach, end)
    gap = statistics.median(gaps) if gaps else 0.0
    bound = "host-bound" if 1 - busy > HOST_BOUND_IDLE else "GPU-bound"
    return Verdict(bound, busy, gap, len(ordered), modelled, device)
