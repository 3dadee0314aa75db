"""The records a profile is made of: a spread of timings, a graph's verdict, one Dynamo graph of the model.

Plain frozen data, filled in by `fusionlab.profile.run` and rendered by `ModelProfile`.

    >>> Spread.of([1.0, 1.2, 0.9]).median
    1.0
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["GraphBreak", "GraphProfile", "Spread", "Verdict", "parse_break", "short_path"]


@dataclass(frozen=True)
class Spread:
    """Several rounds of one timing (milliseconds): the median, the fastest and the slowest round.

    Example: `Spread.of([1.0, 1.2, 0.9])` -> `Spread(median=1.0, low=0.9, high=1.2, rounds=3)`.
    """

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        values = list(values)
        if not values:
            raise ValueError("a spread needs at least one round: got none")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def __str__(self) -> str:
        if self.rounds == 1:
            return f"{self.median:.4g} ms"
        return f"{self.median:.4g} ms ({self.low:.4g}-{self.high:.4g}, {self.rounds} rounds)"


@dataclass(frozen=True)
class Verdict:
    """Whether a graph keeps the GPU busy: host-bound (the GPU waits between launches) or GPU-bound.

    `busy_fraction` is the GPU's busy time over the span from its first kernel's start to its last kernel's end;
    `median_gap_us` the median idle time between two kernels. `modelled` says the timeline is the time model's
    (bytes and launches on a device profile), not a measurement.
    Example: `Verdict("host-bound", 0.37, 12.0, 48, True, "H200")`.
    """

    bound: str  # "host-bound" or "GPU-bound"
    busy_fraction: float
    median_gap_us: float
    launches: int
    modelled: bool
    device: str

    def __str__(self) -> str:
        how = f"modelled on {self.device}" if self.modelled else f"measured on {self.device}"
        if self.bound == "host-bound":
            said = (f"GPU idle {100 * (1 - self.busy_fraction):.0f}% between launches "
                    f"(median gap {self.median_gap_us:.3g} µs)")
        else:
            said = f"GPU busy {100 * self.busy_fraction:.0f}% (median gap {self.median_gap_us:.3g} µs)"
        return f"{self.bound}: {said}, {self.launches} launches, {how}"


@dataclass(frozen=True)
class GraphBreak:
    """Why Dynamo ended a graph: the reason in words and the user's source line ("file.py:LINE")."""

    reason: str
    source: str = ""
    line: str = ""  # the source text of that line, when Dynamo gave it

    def __str__(self) -> str:
        where = f" at {self.source}" + (f" `{self.line}`" if self.line else "") if self.source else ""
        return f"graph break{where}: {self.reason}"


_BREAK = re.compile(r"^graph break(?: at (?P<file>.+?):(?P<lineno>\d+)(?: `(?P<line>.*?)`)?)?: (?P<reason>.*)$",
                    re.DOTALL)


def short_path(path: str) -> str:
    """A source file as people name it: the path under site-packages, else the file's name."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def parse_break(ended_by: str) -> GraphBreak | None:
    """The graph break in a `BackendGraph.ended_by` text, or None when the graph ended with the function."""
    if not ended_by:
        return None
    match = _BREAK.match(ended_by.strip())
    if match is None:
        return GraphBreak(reason=ended_by.strip())
    source = f"{short_path(match['file'])}:{match['lineno']}" if match["file"] else ""
    return GraphBreak(reason=match["reason"].strip(), source=source, line=(match["line"] or "").strip())


@dataclass(frozen=True)
class GraphProfile:
    """One aten graph of the model as the fusionlab backend compiled it, with what the profile found in it.

    `role` is "inference", "forward" or "backward"; `ended_by` the graph break that ended its Dynamo graph (None
    when the function returned); `saved_bytes` the activations the forward graph saves for the backward one (the
    backward graph's inputs that are neither parameters nor gradients), on both graphs of a pair.
    Example: `prof.graphs[0].exploration.show()`.
    """

    index: int
    role: str
    exploration: Any  # fusionlab.explore.Exploration
    ended_by: GraphBreak | None
    verdict: Verdict
    kernels: int
    externs: int
    saved_bytes: int = 0
    saved: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"graph {self.index} ({self.role})"

    def show(self) -> Any:
        """The Explorer of this graph."""
        return self.exploration.show()

    def __repr__(self) -> str:
        saved = f", saves {self.saved_bytes / 1e6:.3g} MB" if self.saved_bytes else ""
        ended = f", ended by a {self.ended_by}" if self.ended_by else ""
        return (f"GraphProfile({self.name}: {self.kernels} kernels, {self.externs} externs{saved}; "
                f"{self.verdict.bound}{ended})")
