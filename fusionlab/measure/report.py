"""The benchmark's results as records: one row per variant and per kernel, and the recorded GPU runs.

Plain data (no pandas needed); `.table` and `.recorded_table` build DataFrames on demand.

    >>> report.row("fusionlab").median_ms, report.row("fusionlab").timing   # doctest: +SKIP
    (0.071, 'modelled')
"""

from __future__ import annotations

import csv
import html
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fusionlab.measure.devices import DeviceProfile
from fusionlab.measure.timing import NOISY_SPREAD, threads_text

__all__ = ["BenchReport", "BenchRow", "RECORDED_RESULTS", "recorded_results"]

RECORDED_RESULTS = Path(__file__).parent.parent / "data" / "bench_h200.csv"


@dataclass(frozen=True)
class BenchRow:
    """One line of a benchmark: a whole program (`kernel == ""`) or one of its kernels.

    `variant` is "reference" (the minimal bytes at copy bandwidth), "eager", "fusionlab", "inductor", or
    "unfused" (fusionlab's plan with policy "none", modelled: one kernel per primitive).

    `timing` is "measured" (timed on `device`), "modelled" (bytes and launches over a device profile; then
    `device` names the profile) or "untimed" (a kernel whose time was not taken). `bytes` is what the row's
    variant moves by its own count: fusionlab's plan, Inductor's kernel_num_gb, the minimal input + output
    bytes for the `reference` row. `pct_of_roofline` (programs only) is the minimal bytes (memory-bound) or
    the FLOPs (compute-bound) over the time, against the copy bandwidth or the bf16 peak.
    A measured program row also has `low_ms` and `high_ms` (its fastest and slowest round: `median_ms` is the
    median of the rounds) and, on a CPU, the `threads` it ran with.
    Example: `BenchRow("eager", "", 0.21, 3, None, None, None, "measured", "cuda")`.
    """

    variant: str
    kernel: str
    median_ms: float | None
    launches: int | None
    bytes: int | None
    achieved_gbps: float | None
    pct_of_copy_bw: float | None
    timing: str
    device: str
    flops: int | None = None
    pct_of_roofline: float | None = None
    low_ms: float | None = None
    high_ms: float | None = None
    threads: int | None = None

    @property
    def spread(self) -> float | None:
        """The slowest round over the fastest (None when the row was not timed in rounds)."""
        if self.low_ms is None or self.high_ms is None or self.low_ms <= 0:
            return None
        return self.high_ms / self.low_ms


@dataclass(frozen=True)
class BenchReport:
    """Eager vs fusionlab vs Inductor for one function on one device; `.table` is a pandas DataFrame.

    Example: `fl.explore(fn, *inputs).benchmark().table`.
    """

    workload: str
    device: str
    bound: str
    minimal_bytes: int
    flops: int
    copy_bandwidth_bytes_per_s: float
    profile: DeviceProfile
    rows: tuple[BenchRow, ...]
    fusionlab_compile_s: float | None = None
    inductor_compile_s: float | None = None
    recorded: tuple[dict[str, str], ...] = ()
    round_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)
    threads: int | None = None  # the CPU thread count eager and Inductor were compiled and timed with

    def noisy(self) -> tuple[str, ...]:
        """The measured variants whose rounds differ by more than NOISY_SPREAD times (a busy machine)."""
        return tuple(variant for variant, rounds in self.round_ms.items()
                     if rounds and min(rounds) > 0 and max(rounds) / min(rounds) > NOISY_SPREAD)

    def speedups(self, variant: str = "fusionlab", over: str = "inductor") -> tuple[float, ...]:
        """`over`'s time divided by `variant`'s, round by round (both timed in the same rounds); empty when either
        was not measured in rounds (fusionlab on a CPU is modelled)."""
        mine, theirs = self.round_ms.get(variant, ()), self.round_ms.get(over, ())
        if not mine or not theirs:
            return ()
        return tuple(t / m for m, t in zip(mine, theirs, strict=True) if m > 0)

    def row(self, variant: str, kernel: str = "", timing: str | None = None) -> BenchRow:
        """The row of `variant` (the whole program unless `kernel` is named), measured before modelled."""
        matches = [r for r in self.rows if r.variant == variant and r.kernel == kernel]
        if timing is not None:
            matches = [r for r in matches if r.timing == timing]
        matches.sort(key=lambda r: r.timing != "measured")
        if not matches:
            available = sorted({(r.variant, r.timing) for r in self.rows if not r.kernel})
            raise KeyError(f"no row for variant={variant!r} kernel={kernel!r} timing={timing!r}: have {available}")
        return matches[0]

    def program_rows(self) -> tuple[BenchRow, ...]:
        """The whole-program rows (one per variant and timing), without the per-kernel ones."""
        return tuple(r for r in self.rows if not r.kernel)

    @property
    def table(self) -> Any:
        """A pandas DataFrame, one row per variant and per kernel."""
        import pandas

        return pandas.DataFrame([asdict(r) for r in self.rows], columns=[f.name for f in fields(BenchRow)])

    @property
    def recorded_table(self) -> Any:
        """The GPU measurements shipped with fusionlab for this workload, as a pandas DataFrame."""
        import pandas

        return pandas.DataFrame(list(self.recorded))

    def as_text(self) -> str:
        header = (
            f"# {self.workload} on {self.device} ({self.bound}-bound): minimal {self.minimal_bytes / 1e6:.3f} MB"
            f", {self.flops / 1e9:.3f} GFLOP; copy bandwidth {self.copy_bandwidth_bytes_per_s / 1e9:.0f} GB/s"
            f" measured; model: {self.profile!r}"
        )
        lines = [header, f"{'variant':<10} {'kernel':<44} {'ms':>10} {'launches':>8} {'MB':>10} {'GB/s':>8} timing"]
        for r in self.rows:
            lines.append(
                f"{r.variant:<10} {(r.kernel or '(program)')[:44]:<44} {_number(r.median_ms, 4):>10} "
                f"{_number(r.launches, 0):>8} {_number(None if r.bytes is None else r.bytes / 1e6, 3):>10} "
                f"{_number(r.achieved_gbps, 1):>8} {r.timing} ({r.device})"
            )
        if self.recorded:
            lines.append(f"# recorded on a GPU: {len(self.recorded)} rows (see .recorded_table)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        parts = [
            f"{r.variant} {r.median_ms:.4g} ms ({r.timing}"
            + (f", {r.low_ms:.3g}-{r.high_ms:.3g}" if r.low_ms is not None and r.high_ms is not None else "")
            + ")"
            for r in self.program_rows()
            if r.median_ms is not None and r.variant != "reference"
        ]
        where = f"{self.device}, {threads_text(self.threads)}" if self.threads else self.device
        noisy = f"; noisy rounds: {', '.join(self.noisy())}" if self.noisy() else ""
        return f"BenchReport({self.workload} on {where}: {', '.join(parts)}{noisy})"

    def _repr_html_(self) -> str:
        escape = html.escape
        names = [f.name for f in fields(BenchRow)]
        head = "".join(f"<th>{escape(name)}</th>" for name in names)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(format_cell(getattr(r, name)))}</td>" for name in names) + "</tr>"
            for r in self.rows
        )
        recorded = ""
        if self.recorded:
            columns = list(self.recorded[0])
            recorded_head = "".join(f"<th>{escape(c)}</th>" for c in columns)
            recorded_body = "".join(
                "<tr>" + "".join(f"<td>{escape(str(row.get(c, '')))}</td>" for c in columns) + "</tr>"
                for row in self.recorded
            )
            recorded = (
                "<p>Recorded on a GPU (shipped with fusionlab)</p>"
                f"<table><tr>{recorded_head}</tr>{recorded_body}</table>"
            )
        title = escape(f"{self.workload} on {self.device} ({self.bound}-bound); model: {self.profile!r}")
        return f"<div><b>{title}</b><table><tr>{head}</tr>{body}</table>{recorded}</div>"


def _number(value: float | int | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_cell(value: Any) -> str:
    """A table cell: blank for None, 4 significant digits for floats."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def recorded_results(workload: str | None = None, path: Path | str | None = None) -> tuple[dict[str, str], ...]:
    """The GPU suite results shipped in `fusionlab/data/bench_h200.csv` (empty until recorded).

    Each row is a dict of the CSV's columns (strings), optionally only those of `workload`.
    """
    source = Path(path) if path is not None else RECORDED_RESULTS
    if not source.exists():
        return ()
    with source.open(newline="", encoding="utf-8") as handle:
        rows = tuple(dict(row) for row in csv.DictReader(handle))
    if workload is not None:
        rows = tuple(row for row in rows if row.get("workload") == workload)
    return rows
