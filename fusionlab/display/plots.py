"""Timing charts from benchmark rows: programs side by side, the per-kernel breakdown, and a roofline.

Rows are `fusionlab.measure.report.BenchRow`s (or anything with the same attributes), so a chart can be drawn
from the rows received so far while a benchmark runs. Measured, modelled and recorded figures go in separate
panels, each titled with what it is: a CPU's wall clock (with its thread count), a model of a GPU, or a GPU run
shipped with fusionlab. A measured bar is the median of several rounds and carries a whisker from the fastest to
the slowest round; when those differ by more than `NOISY_SPREAD` times the bar's label says "noisy" in red and the
panel's title says to run again. Figures are `matplotlib.figure.Figure` objects (no pyplot state);
`figure_png` / `figure_svg` serialise them.

    >>> figure = timing_figure(report.rows, report.recorded)
    >>> png = figure_png(figure)
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from fusionlab.measure.timing import NOISY_SPREAD, threads_text

__all__ = ["CPU_NOTE", "Bar", "Panel", "figure_png", "figure_svg", "kernel_figure", "noisy_note", "roofline_figure",
           "timing_figure", "timing_panels"]

CPU_NOTE = ("On a CPU, fusionlab's kernels run in Triton's interpreter, which is never timed: fusionlab's (and "
            "Inductor's GPU plan's) times are modelled on a GPU profile from the bytes moved and the launches, "
            "and, for the named workloads of `fusionlab bench`, the GPU runs shipped with fusionlab are shown "
            "beside them. Eager and Inductor "
            "are measured on this CPU by the wall clock at a fixed thread count (1 unless benchmark(threads=N)), "
            "each the median of several rounds, with a whisker from the fastest round to the slowest.")
_COLOURS = {"eager": "#6b7280", "fusionlab": "#2563eb", "inductor": "#ea580c", "unfused": "#cbd5e1"}
_ORDER = ("unfused", "eager", "inductor", "fusionlab")


@dataclass(frozen=True)
class Bar:
    """One bar: a program's median time and, when it was timed in rounds, its fastest and slowest round."""

    label: str
    variant: str
    milliseconds: float
    note: str = ""
    low_ms: float | None = None
    high_ms: float | None = None

    @property
    def spread(self) -> float | None:
        if self.low_ms is None or self.high_ms is None or self.low_ms <= 0:
            return None
        return self.high_ms / self.low_ms

    @property
    def noisy(self) -> bool:
        return (self.spread or 1.0) > NOISY_SPREAD


@dataclass(frozen=True)
class Panel:
    """One chart: bars of one kind of figure (measured on a device, modelled on a profile, or recorded)."""

    title: str
    bars: tuple[Bar, ...]
    floor_ms: float | None = None  # the least any program can take there (minimal bytes over the bandwidth)


def _key(variant: str) -> int:
    return _ORDER.index(variant) if variant in _ORDER else len(_ORDER)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


def timing_panels(rows: Sequence[Any], recorded: Sequence[Mapping[str, Any]] = ()) -> tuple[Panel, ...]:
    """Program rows grouped into panels: "measured on cpu", "modelled on H200", "recorded on <gpu>"."""
    panels: dict[tuple[str, str], list[Bar]] = {}
    floors: dict[str, float] = {}
    threads: dict[str, int] = {}
    for row in rows:
        if row.kernel or row.median_ms is None:
            continue
        if row.variant == "reference":
            floors[row.device] = row.median_ms
            continue
        low, high = getattr(row, "low_ms", None), getattr(row, "high_ms", None)
        if getattr(row, "threads", None):
            threads[row.device] = row.threads
        panels.setdefault((row.timing, row.device), []).append(Bar(row.variant, row.variant, row.median_ms,
                                                                   low_ms=low, high_ms=high))
    result = []
    for (timing, device), bars in sorted(panels.items(), key=lambda item: item[0][0] != "measured"):
        if timing == "measured":
            title = _measured_title(device, threads.get(device), bars)
        else:
            title = f"modelled on {device} (bytes and launches over its bandwidth; not a measurement)"
        ordered = tuple(sorted(bars, key=lambda b: _key(b.variant)))
        result.append(Panel(title, ordered, floors.get(device) if timing == "measured" else None))
    for record in [r for r in recorded if not r.get("error")][:1]:
        bars = []
        for variant in ("eager", "inductor", "fusionlab"):
            value = _number(record.get(f"{variant}_ms"))
            if value is not None:
                bars.append(Bar(variant, variant, value))
        if bars:
            where = record.get("gpu") or "a GPU"
            shape = " ".join(str(record.get(k)) for k in ("dtype", "shape") if record.get(k))
            result.append(Panel(f"recorded on {where} {shape} (shipped with fusionlab)", tuple(bars)))
    return tuple(result)


def _measured_title(device: str, threads: int | None, bars: Sequence[Bar]) -> str:
    """'measured on cpu, 1 thread (wall clock; median of rounds, whiskers: fastest-slowest round)' + a warning."""
    what = "wall clock" if device.startswith("cpu") else "CUDA events"
    where = f"{device}, {threads_text(threads)}" if threads else device
    rounds = "; median of rounds, whiskers: fastest-slowest round" if any(b.spread for b in bars) else ""
    title = f"measured on {where} ({what}{rounds})"
    note = noisy_note(bars)
    return f"{title}\n{note}" if note else title


def noisy_note(bars: Sequence[Any]) -> str:
    """A warning naming the bars (or program rows) whose rounds differ by more than NOISY_SPREAD times; '' if none."""
    noisy = [f"{getattr(bar, 'label', None) or bar.variant} {bar.spread:.2g}x" for bar in bars
             if (getattr(bar, "spread", None) or 1.0) > NOISY_SPREAD]
    if not noisy:
        return ""
    return f"NOISY: slowest round / fastest: {', '.join(noisy)}; the machine was busy: run again"


def timing_figure(rows: Sequence[Any], recorded: Sequence[Mapping[str, Any]] = (), title: str = "",
                  width: float = 7.5) -> Figure:
    """Eager vs fusionlab vs Inductor: one horizontal bar chart per panel (see `timing_panels`)."""
    panels = timing_panels(rows, recorded)
    figure = Figure(figsize=(width, 0.6 + 1.15 * max(1, len(panels))), layout="constrained")
    if not panels:
        axes = figure.add_subplot()
        axes.text(0.5, 0.5, "no timings yet: press \"run benchmark\" (or call .run())", ha="center",
                  va="center", color="#6b7280")
        axes.set_axis_off()
        return figure
    grid = figure.subplots(len(panels), 1, squeeze=False)
    for axes, panel in zip(grid[:, 0], panels):
        labels = [bar.label for bar in panel.bars]
        values = [bar.milliseconds for bar in panel.bars]
        modelled = panel.title.startswith("modelled")
        axes.barh(labels, values, color=[_COLOURS.get(b.variant, "#9ca3af") for b in panel.bars],
                  hatch="//" if modelled else None, edgecolor="white")
        below = [b.milliseconds - b.low_ms if b.low_ms is not None and b.spread else 0.0 for b in panel.bars]
        above = [b.high_ms - b.milliseconds if b.high_ms is not None and b.spread else 0.0 for b in panel.bars]
        if any(below) or any(above):  # whiskers: the fastest and the slowest round around the median
            axes.errorbar(values, range(len(values)), xerr=[below, above], fmt="none", ecolor="#111827",
                          elinewidth=1, capsize=3)
        for position, bar in enumerate(panel.bars):
            end = max(bar.milliseconds, bar.high_ms or 0.0)
            text = f" {bar.milliseconds:.3g} ms"
            if bar.spread:
                text += f" ({bar.low_ms:.2g}-{bar.high_ms:.2g})" + (" noisy" if bar.noisy else "")
            axes.text(end, position, text, va="center", fontsize=8, color="#dc2626" if bar.noisy else "black")
        label = "ms (lower is better)"
        if panel.floor_ms:
            axes.axvline(panel.floor_ms, color="#16a34a", linestyle="--", linewidth=1)
            label += f"; green line: the least possible here, {panel.floor_ms:.2g} ms (inputs + outputs once)"
        highest = [max(b.milliseconds, b.high_ms or 0.0) for b in panel.bars]
        axes.set_xlim(0, max(highest + [panel.floor_ms or 0]) * 1.45)
        axes.set_title(panel.title, fontsize=9, loc="left", color="#dc2626" if "NOISY" in panel.title else "black")
        axes.tick_params(labelsize=8)
        axes.set_xlabel(label, fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def kernel_figure(rows: Sequence[Any], top: int = 12, width: float = 7.5) -> Figure:
    """Per-kernel times: where each variant's time goes (its `top` slowest kernels, per panel)."""
    panels: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for row in rows:
        if not row.kernel or row.median_ms is None:
            continue
        panels.setdefault((row.variant, row.timing, row.device), []).append((row.kernel, row.median_ms))
    figure = Figure(figsize=(width, 0.8 + 0.22 * sum(min(top, len(v)) + 2 for v in panels.values()) if panels
                             else 1.5), layout="constrained")
    if not panels:
        axes = figure.add_subplot()
        axes.text(0.5, 0.5, "no per-kernel times yet", ha="center", va="center", color="#6b7280")
        axes.set_axis_off()
        return figure
    heights = [min(top, len(v)) + 1 for v in panels.values()]
    grid = figure.subplots(len(panels), 1, squeeze=False, height_ratios=heights)
    for axes, ((variant, timing, device), kernels) in zip(grid[:, 0], panels.items()):
        count = len(kernels)
        kernels = sorted(kernels, key=lambda item: item[1], reverse=True)[:top]
        shown = f"{len(kernels)} of {count} kernels shown (the slowest)" if len(kernels) < count else \
            f"all {count} kernels"
        names = [name if len(name) <= 42 else name[:40] + "..." for name, _ in kernels][::-1]
        values = [value for _, value in kernels][::-1]
        axes.barh(names, values, color=_COLOURS.get(variant, "#9ca3af"), hatch="//" if timing == "modelled" else None,
                  edgecolor="white")
        total = sum(v for _, v in kernels)
        axes.set_title(f"{variant}: {timing} on {device}, per kernel: {shown}, {total:.3g} ms in these", fontsize=9,
                       loc="left")
        axes.tick_params(labelsize=7)
        axes.set_xlabel("ms", fontsize=8)
    return figure


def roofline_figure(rows: Sequence[Any], width: float = 7.5) -> Figure:
    """Achieved bandwidth of each program and kernel against its device's ceiling (copy bandwidth)."""
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for row in rows:
        if row.variant == "reference" or row.achieved_gbps is None or not row.pct_of_copy_bw:
            continue
        ceiling = row.achieved_gbps / (row.pct_of_copy_bw / 100)
        label = f"{row.variant}" + (f": {row.kernel[:36]}" if row.kernel else " (program)")
        groups.setdefault(f"{row.timing} on {row.device}", []).append((label, row.achieved_gbps, ceiling))
    figure = Figure(figsize=(width, 0.8 + 0.25 * sum(len(v) + 2 for v in groups.values()) if groups else 1.5),
                    layout="constrained")
    if not groups:
        axes = figure.add_subplot()
        axes.text(0.5, 0.5, "no bandwidth figures yet", ha="center", va="center", color="#6b7280")
        axes.set_axis_off()
        return figure
    grid = figure.subplots(len(groups), 1, squeeze=False, height_ratios=[len(v) + 1 for v in groups.values()])
    for axes, (title, entries) in zip(grid[:, 0], groups.items()):
        labels = [label for label, _, _ in entries][::-1]
        values = [value for _, value, _ in entries][::-1]
        ceiling = max(c for _, _, c in entries)
        colours = [_COLOURS.get(label.split(":")[0].split(" ")[0], "#9ca3af") for label in labels]
        axes.barh(labels, values, color=colours, hatch="//" if title.startswith("modelled") else None,
                  edgecolor="white")
        for position, value in enumerate(values):
            axes.text(value, position, f" {value:.3g} GB/s ({value / ceiling * 100:.2g}%)", va="center", fontsize=7)
        axes.axvline(ceiling, color="#dc2626", linewidth=1.2)
        axes.text(ceiling, len(values) - 0.5, f"ceiling {ceiling:.0f} GB/s ", color="#dc2626", fontsize=7,
                  ha="right", va="bottom")
        # A log axis: a small kernel reaches a tiny fraction of the ceiling (launch-bound), a big one most of it.
        axes.set_xscale("log")
        axes.set_xlim(min(values) / 3, ceiling * 2.5)
        axes.set_title(f"roofline, {title}: achieved GB/s vs the memory ceiling", fontsize=9, loc="left")
        axes.tick_params(labelsize=7)
        axes.set_xlabel("GB/s (bytes read + written per second)", fontsize=8)
    return figure


def figure_png(figure: Figure, dpi: int = 96) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def figure_svg(figure: Figure) -> str:
    """Inline SVG (text drawn as paths: no fonts to load)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
