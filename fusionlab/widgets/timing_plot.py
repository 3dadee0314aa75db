"""TimingPlot: eager vs fusionlab vs Inductor, redrawn while the benchmark runs.

Rows stream in through `benchmark(callback=...)`; each redraws a matplotlib figure into an `Output` widget
(updates inside one running cell). Views: the programs, the per-kernel breakdown, and a roofline. On a CPU the
fusionlab figures are modelled on a GPU profile and recorded GPU runs are shown beside them, each labelled.

    >>> plot = TimingPlot(ex)
    >>> plot.show()            # displays it (and lets run() refresh the static copy a saved notebook keeps)
    >>> report = plot.run()    # or TimingPlot(report=ex.benchmark())
"""

from __future__ import annotations

import base64
import html
import time
from typing import Any

import ipywidgets
import traitlets

from fusionlab.display import style
from fusionlab.display.plots import CPU_NOTE, figure_png, kernel_figure, noisy_note, roofline_figure, timing_figure
from fusionlab.display.tables import frame_table
from fusionlab.widgets.base import StaticFallback

__all__ = ["TimingPlot"]

VIEWS = ("programs", "per kernel", "roofline")



class TimingPlot(StaticFallback, ipywidgets.VBox):
    """Benchmark charts; `rows` grows as a benchmark runs, `view` picks programs / per kernel / roofline."""

    view = traitlets.Enum(VIEWS, default_value=VIEWS[0])
    rows_seen = traitlets.Int(0)

    def __init__(self, exploration: Any = None, report: Any = None, min_interval: float = 0.3,
                 **kwargs: Any) -> None:
        self.exploration = exploration
        self.report = report
        self.rows: list[Any] = list(report.rows) if report is not None else []
        self.recorded: tuple[dict[str, str], ...] = tuple(report.recorded) if report is not None else ()
        self.min_interval = min_interval
        self._last_draw = 0.0
        self._display: Any = None
        self.views = ipywidgets.ToggleButtons(options=list(VIEWS), value=VIEWS[0], style={"button_width": "auto"})
        self.button = ipywidgets.Button(description="run benchmark", icon="play",
                                        disabled=exploration is None)
        self.status = ipywidgets.HTML()
        self.output = ipywidgets.Output(layout={"min_height": "120px"})
        self.table = ipywidgets.HTML()
        self.note = ipywidgets.HTML()
        super().__init__([ipywidgets.HBox([self.button, self.views]), self.status, self.note, self.output,
                          ipywidgets.Accordion(children=[self.table], titles=("table",))], **kwargs)
        self.add_class("fusionlab-timing-plot")
        self.views.observe(lambda change: setattr(self, "view", change["new"]), names="value")
        self.observe(self._on_view, names="view")
        self.button.on_click(lambda _: self.run())
        self.redraw()

    def _on_view(self, change: dict[str, Any]) -> None:
        # `plot.view = ...` from Python must move the highlighted button too: a button left on "programs"
        # while the chart shows the roofline would ignore the click that should bring the programs back.
        if self.views.value != change["new"]:
            self.views.value = change["new"]
        self.redraw()

    # -- data -----------------------------------------------------------------------------------------
    def add_row(self, row: Any) -> None:
        """One benchmark row arrived: keep it and redraw (at most every `min_interval` s, program rows always)."""
        self.rows.append(row)
        self.rows_seen = len(self.rows)
        now = time.perf_counter()
        if not row.kernel or now - self._last_draw >= self.min_interval:
            self.redraw()

    def set_report(self, report: Any) -> None:
        self.report = report
        self.rows = list(report.rows)
        self.recorded = tuple(report.recorded)
        self.rows_seen = len(self.rows)
        self.redraw()
        if self._display is not None:  # the saved notebook's static copy gets the final charts
            self._display.update(self)

    def show(self) -> None:
        """Display the plot in the notebook; a later `run()` also refreshes its static copy."""
        from IPython.display import display

        self._display = display(self, display_id=True)

    def run(self, **options: Any) -> Any:
        """Run `exploration.benchmark(...)`, drawing as rows arrive; returns the BenchReport."""
        if self.exploration is None:
            raise ValueError("this TimingPlot has no exploration to benchmark: TimingPlot(ex).run()")
        self.rows = []
        self.button.disabled = True
        self.status.value = f"<span style='{style.NOTE_STYLE}'>benchmark running ...</span>"
        try:
            options.setdefault("progress", False)
            report = self.exploration.benchmark(callback=self.add_row, **options)
        except Exception as error:
            self.status.value = f"<div style='{style.WARNING_STYLE}'>benchmark failed: " \
                                f"{html.escape(f'{type(error).__name__}: {error}')}</div>"
            raise
        finally:
            self.button.disabled = False
        self.set_report(report)
        return report

    # -- drawing --------------------------------------------------------------------------------------
    def figure(self) -> Any:
        if self.view == "per kernel":
            return kernel_figure(self.rows)
        if self.view == "roofline":
            return roofline_figure(self.rows)
        title = ""
        if self.report is not None:
            title = f"{self.report.workload} on {self.report.device} ({self.report.bound}-bound)"
        return timing_figure(self.rows, self.recorded, title)

    def redraw(self) -> None:
        self._last_draw = time.perf_counter()
        png = base64.b64encode(figure_png(self.figure())).decode("ascii")
        # Replacing the Output widget's outputs (a synced trait) redraws in the page at once, inside a running
        # cell, and works the same outside a kernel (tests, scripts).
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": png, "text/plain": f"<timing chart: {self.view}>"}},)
        on_cpu = any(getattr(r, "timing", "") == "modelled" for r in self.rows) and not any(
            getattr(r, "device", "").startswith("cuda") for r in self.rows)
        self.note.value = f"<div style='{style.NOTE_STYLE}'>{html.escape(CPU_NOTE)}</div>" if on_cpu else ""
        noisy = noisy_note([r for r in self.rows if not r.kernel and getattr(r, "timing", "") == "measured"])
        if noisy:  # a busy machine: say so above the chart, not only in its title
            self.note.value += f"<div style='{style.WARNING_STYLE}'>{html.escape(noisy)}</div>"
        if self.report is not None:
            self.status.value = f"<span style='{style.NOTE_STYLE}'>{html.escape(repr(self.report))}</span>"
        elif self.rows:
            self.status.value = f"<span style='{style.NOTE_STYLE}'>{len(self.rows)} rows so far ...</span>"
        self.table.value = frame_table([_row_dict(r) for r in self.rows], max_height="300px") if self.rows else ""

    def static_png(self) -> bytes | None:
        return figure_png(self.figure()) if self.rows else None

    def static_html(self) -> str:
        if not self.rows:
            return f"<div style='{style.NOTE_STYLE}'>no timings yet: run the benchmark</div>"
        png = base64.b64encode(figure_png(self.figure())).decode("ascii")
        return (f"<div>{self.status.value}{self.note.value}<img src='data:image/png;base64,{png}' "
                f"style='max-width:100%'>{self.table.value}</div>")

    def __repr__(self) -> str:
        return f"TimingPlot({len(self.rows)} rows, view={self.view!r})"


def _row_dict(row: Any) -> dict[str, Any]:
    fields = ("variant", "kernel", "median_ms", "low_ms", "high_ms", "launches", "bytes", "achieved_gbps",
              "pct_of_copy_bw", "timing", "device", "threads")
    return {name: getattr(row, name, None) for name in fields}
