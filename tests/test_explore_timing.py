"""Stage timings: each stage's `seconds` is its own work, so their sum (the benchmark's compile time) is honest."""

from __future__ import annotations

import time

import pytest
import torch

import fusionlab as fl
from fusionlab.stages import STAGES


def test_stage_seconds_do_not_include_earlier_stages() -> None:
    ex = fl.explore(lambda x, w: torch.layer_norm(torch.softmax(x, -1) @ w, (16,)), torch.randn(8, 16),
                    torch.randn(16, 16))
    start = time.perf_counter()
    ex.compiled  # noqa: B018 - computes every stage, each inside the next one's call
    wall = time.perf_counter() - start
    total = sum(getattr(ex, stage).seconds for stage in STAGES)
    assert total <= wall, f"stage seconds sum to {total:.3f} s in a {wall:.3f} s computation: some counted twice"


def test_the_explorers_timing_button_times_eager_and_inductor_at_one_fixed_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The button that gave 24 ms where a cell had given 0.07 ms: on a busy 2-core machine a second OpenMP thread
    waits a scheduler slice at every op's barrier. Inductor is compiled (its C++ keeps the thread count in force)
    and everything is timed at one thread, in rounds; the kernel's own count is restored after."""
    import fusionlab.measure.bench as bench
    from fusionlab.display.plots import timing_panels
    from fusionlab.inductor.records import InductorView
    from fusionlab.widgets import Explorer

    compiled_at: list[int] = []
    timed_at: list[int] = []
    real_time = bench._time

    def compile_spy(fn, inputs):  # eager stands in for Inductor's compile (tens of seconds on 2 cores)
        compiled_at.append(torch.get_num_threads())
        return fn, 0.0

    def time_spy(run, device, repeat):
        timed_at.append(torch.get_num_threads())
        return real_time(run, device, repeat)

    monkeypatch.setattr(bench, "compile_inductor", compile_spy)
    monkeypatch.setattr(bench, "inductor_view", lambda *args, **kwargs: InductorView((), (), "", "cpu"))
    monkeypatch.setattr(bench, "_time", time_spy)
    ex = fl.explore(lambda x, b: torch.nn.functional.gelu(x + b), torch.randn(8, 32), torch.randn(32))
    explorer = Explorer(ex, inductor=False, verify=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        explorer.timings.button.click()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert compiled_at == [1] and timed_at == [1] * 10  # eager and "Inductor", five rounds each
    report = explorer.timings.report
    assert report is not None and report.threads == 1 and "1 thread" in repr(report)
    for variant in ("eager", "inductor"):
        row = report.row(variant, timing="measured")
        assert row.threads == 1 and row.low_ms <= row.median_ms <= row.high_ms
        assert (row.low_ms, row.high_ms) == (min(report.round_ms[variant]), max(report.round_ms[variant]))
    assert timing_panels(report.rows)[0].title.startswith("measured on cpu, 1 thread (wall clock; median of rounds")


def _report(eager_rounds: tuple[float, ...]):
    from fusionlab.measure.devices import get_profile
    from fusionlab.measure.report import BenchReport, BenchRow

    median = sorted(eager_rounds)[len(eager_rounds) // 2]
    rows = (
        BenchRow("eager", "", median, 3, None, None, None, "measured", "cpu", low_ms=min(eager_rounds),
                 high_ms=max(eager_rounds), threads=1),
        BenchRow("fusionlab", "", 0.01, 1, 4096, None, None, "modelled", "H200"),
    )
    return BenchReport("gelu", "cpu", "memory", 4096, 0, 1e10, get_profile("H200"), rows,
                       round_ms={"eager": eager_rounds}, threads=1)


def test_the_chart_draws_each_measured_bar_with_a_whisker_from_its_fastest_to_its_slowest_round() -> None:
    from matplotlib.collections import LineCollection

    from fusionlab.display.plots import timing_figure

    figure = timing_figure(_report((0.2, 0.25, 0.3)).rows)
    measured = figure.axes[0]
    assert "1 thread" in measured.get_title(loc="left")
    whiskers = [c for c in measured.collections if isinstance(c, LineCollection)]
    assert whiskers and [tuple(segment[:, 0]) for segment in whiskers[0].get_segments()] == [(0.2, 0.3)]
    assert not [c for c in figure.axes[1].collections if isinstance(c, LineCollection)]  # modelled: no rounds


def test_a_noisy_timing_is_flagged_on_the_chart_the_widget_and_the_report() -> None:
    from fusionlab.display.plots import timing_panels
    from fusionlab.widgets import TimingPlot

    steady, busy = _report((0.2, 0.25, 0.3)), _report((0.07, 0.08, 24.0))
    assert steady.noisy() == () and busy.noisy() == ("eager",) and "noisy rounds: eager" in repr(busy)
    assert "NOISY" not in timing_panels(steady.rows)[0].title
    assert "NOISY: slowest round / fastest: eager 3.4e+02x" in timing_panels(busy.rows)[0].title
    plot = TimingPlot(report=steady)
    assert "NOISY" not in plot.note.value
    plot.set_report(busy)
    assert "NOISY" in plot.note.value and "run again" in plot.note.value
