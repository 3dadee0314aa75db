"""fusionlab.widgets without a browser: set state as the front end would, check that the other views follow."""

from __future__ import annotations

import html
import importlib
import logging
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import traitlets
from torch import nn

import fusionlab as fl
from fusionlab.display import render as render_module
from fusionlab.inductor.records import InductorKernel, InductorView
from fusionlab.widgets import Explorer, GraphView, SourceCompare, StageStepper, StageView, TimingPlot, stage_widget
from fusionlab.widgets.base import frontend_path

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def block(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    normed = torch.nn.functional.layer_norm(x, (x.shape[-1],))
    return torch.nn.functional.gelu(normed @ weight + bias)


@pytest.fixture(scope="module")
def ex() -> fl.Exploration:
    return fl.explore(block, torch.randn(8, 32), torch.randn(32, 16), torch.randn(16))


def fake_inductor(ex: fl.Exploration) -> InductorView:
    """Two Triton kernels over the same aten nodes as our two groups, and the matmul as an extern call."""
    kernels = (
        InductorKernel("triton_per_fused_native_layer_norm_0", "def triton_per_fused_native_layer_norm_0():\n"
                       "    pass  # layer norm\n", "triton", ("native_layer_norm",), ("native_layer_norm",), 0.001, 0),
        InductorKernel("extern_mm_0", "extern_kernels.mm(buf0, arg1_1, out=buf1)", "extern", ("mm",), ("mm",),
                       None, None),
        InductorKernel("triton_poi_fused_add_gelu_1", "def triton_poi_fused_add_gelu_1():\n    pass  # gelu\n",
                       "triton", ("add", "gelu"), ("add", "gelu"), 0.001, 0),
    )
    return InductorView(kernels, (), "def call(args):\n    pass\n", "cpu", 3, True)


def text(markup: str) -> str:
    """What a reader sees: the markup without its tags (highlighting splits tokens into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def bundle_of(widget: object) -> dict[str, object]:
    result = widget._repr_mimebundle_()  # type: ignore[attr-defined]
    data = result[0] if isinstance(result, tuple) else result
    return dict(data)


# ---- GraphView ----------------------------------------------------------------------------------------


def test_graph_view_front_end_selection_and_fallback(ex: fl.Exploration) -> None:
    view = GraphView(ex.fused)
    assert view.svg.startswith("<svg") and "digraph fusionlab" in view.dot
    assert sorted(n for i, n in view.names.items() if i.startswith("cluster_")) == sorted(
        g.name for g in ex.fused.kernels)
    seen: list[str] = []
    view.observe(lambda change: seen.append(change["new"]), names="selected")
    view.set_state({"selected": "erf"})
    assert view.selected == "erf" and seen == ["erf"]
    bundle = bundle_of(view)
    assert WIDGET_MIME in bundle and "<svg" in str(bundle["text/html"])
    assert 'stroke="#f59e0b"' in str(bundle["text/html"])  # the static fallback shows the selection too


def test_graph_view_replays_steps_and_levels(ex: fl.Exploration) -> None:
    view = GraphView(ex.fused)
    final = view.svg
    view.step = -1
    assert view.svg != final and view.step == -1
    view.level = "captured"
    assert "native_layer_norm" in view.names.values()


def test_graph_view_without_dot_shows_how_to_install(monkeypatch: pytest.MonkeyPatch, ex: fl.Exploration) -> None:
    monkeypatch.setattr(render_module, "find_dot", lambda: None)
    view = GraphView(ex.fused)
    assert view.svg == "" and "apt-get install graphviz" in view.message and view.dot.startswith("digraph")
    assert "apt-get install graphviz" in str(bundle_of(view)["text/html"])


def test_front_end_files_are_found() -> None:
    esm = frontend_path("graph_view.js").read_text()
    assert "export default" in esm and "model.set(\"selected\"" in esm and "save_changes" in esm
    assert "querySelectorAll(\"script, foreignObject\")" in esm
    assert frontend_path("graph_view.css").is_file()
    with pytest.raises(FileNotFoundError, match="reinstall"):
        frontend_path("missing.js")


def test_front_end_comes_from_the_wheel_when_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fusionlab.widgets.base as base

    installed = tmp_path / "fusionlab"
    (installed / "_widgets_frontend").mkdir(parents=True)
    (installed / "_widgets_frontend" / "graph_view.js").write_text("export default {};")
    monkeypatch.setattr(base, "_PACKAGE", installed)
    assert frontend_path("graph_view.js") == installed / "_widgets_frontend" / "graph_view.js"


# ---- the Explorer: a click in the graph moves every other view -----------------------------------------


def test_explorer_follows_a_click_in_the_graph(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, inductor=fake_inductor(ex), verify=False)
    first, last = ex.fused.kernels[0], ex.fused.kernels[-1]
    assert explorer.source.group == first.name
    left, right, groups = explorer.source.left.value, explorer.source.right.value, explorer.groups.value
    assert "layer norm" in right

    explorer.graph.set_state({"selected": "erf"})  # what a click on the node `erf` sends
    assert explorer.source.group == last.name
    assert explorer.source.left.value != left and "= _erf(" in text(explorer.source.left.value)
    assert explorer.source.right.value != right and "# gelu" in text(explorer.source.right.value)
    assert explorer.groups.value != groups
    rows = [g for g in ex.fused.groups if g.kind != "view"]  # views share one last row
    assert re.findall(r"<tr data-row='(\d+)'><td style='[^']*#fef9c3", explorer.groups.value) == [
        str(rows.index(last))]
    assert "selected: erf" in explorer.selection.value

    explorer.graph.set_state({"selected": first.name})  # a click on a cluster sends the group's name
    assert explorer.source.group == first.name and explorer.source.picker.value == first.name


def test_explorer_group_picker_moves_the_graph_selection(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, inductor=False, verify=False)
    extern = next(g for g in ex.fused.groups if g.kind == "extern")
    explorer.source.picker.value = extern.name
    assert explorer.graph.selected == extern.name
    assert "# extern:" in text(explorer.source.left.value)
    assert "not loaded" in explorer.source.right.value


def test_explorer_input_selection_keeps_sources(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, inductor=False, verify=False)
    group = explorer.source.group
    explorer.graph.set_state({"selected": "x"})
    assert explorer.source.group == group and "graph input" in explorer.selection.value


def test_explorer_stepper_drives_the_graph_and_the_decisions(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, inductor=False, verify=True)
    assert "VerifyReport(ok=True" in explorer.title.value
    svg, decisions = explorer.graph.svg, explorer.decisions.value
    explorer.stepper.slider.value = 1  # one decision made: as the slider (or the play button) in the page would
    assert explorer.stepper.step == 0 and explorer.graph.step == 0
    assert explorer.graph.svg != svg and explorer.decisions.value != decisions
    assert "decision 1 of" in explorer.stepper.card.value
    explorer.stepper.stage_slider.value = "captured"
    assert explorer.graph.level == "captured" and explorer.stepper.slider.disabled
    assert "aten.native_layer_norm" in text(explorer.stepper.text.value)
    explorer.stepper.stage = "generated"
    assert explorer.graph.step is None and "@triton.jit" in text(explorer.stepper.text.value)


def test_explorer_static_fallback(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, inductor=fake_inductor(ex), verify=False)
    bundle = bundle_of(explorer)
    assert WIDGET_MIME in bundle
    page = str(bundle["text/html"])
    assert "<svg" in page and "triton_per_fused_native_layer_norm_0" in page and "decisions" in page


def test_explorer_says_why_inductor_is_missing(monkeypatch: pytest.MonkeyPatch, ex: fl.Exploration) -> None:
    import fusionlab.display.session as session

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no compiler")

    monkeypatch.setattr(session, "inductor_for", fail)
    explorer = Explorer(ex, inductor=True, verify=False)
    assert "no compiler" in explorer.source.right.value and "no compiler" in explorer.inductor_tables.value


def test_explorer_with_the_real_inductor(ex: fl.Exploration) -> None:
    explorer = Explorer(ex, verify=False)
    assert getattr(explorer.inductor, "kernels", None), explorer.inductor
    explorer.graph.set_state({"selected": "erf"})
    assert "TorchInductor:" in explorer.source.right.value and "gelu" in text(explorer.source.right.value)


# ---- SourceCompare, StageStepper, TimingPlot, stage widgets -------------------------------------------


def test_source_compare_modes(ex: fl.Exploration) -> None:
    compare = SourceCompare(ex.generated, inductor=fake_inductor(ex))
    assert compare.select("gelu") and compare.group == ex.fused.kernels[-1].name
    assert not compare.select("no_such_node")
    compare.mode = "diff"
    assert compare.body.children == (compare.single,) and "aligned by what each line does" in compare.single.value
    compare.mode = "wrappers"
    assert "fusionlab_program" in text(compare.left.value) and "def call" in text(compare.right.value)
    compare.modes.value = "extern calls"  # the toggle buttons, as clicked
    assert compare.mode == "extern calls"
    assert "# extern:" in text(compare.left.value) and "extern_kernels.mm" in text(compare.right.value)


def test_stage_stepper_from_a_fused_stage(ex: fl.Exploration) -> None:
    stepper = StageStepper(ex.fused)
    assert list(stepper.stage_slider.options) == ["captured", "decomposed", "fused"]
    stepper.step = -1
    assert "Before any decision" in stepper.card.value
    assert WIDGET_MIME in bundle_of(stepper)


def test_stepper_slider_counts_decisions_as_the_card_does(ex: fl.Exploration) -> None:
    stepper = StageStepper(ex)
    total = len(ex.fused.decisions)
    # At the end: the slider reads N, the card "decision N of N" (it read N-1 beside "N of N").
    assert stepper.step == total - 1 and stepper.slider.value == total == stepper.play.value
    assert f"decision {total} of {total}" in stepper.card.value
    assert (stepper.slider.min, stepper.slider.max, stepper.play.min, stepper.play.max) == (0, total, 0, total)
    stepper.step = 2  # from Python, as lesson 02 does: the slider follows
    assert stepper.slider.value == 3 and f"decision 3 of {total}" in stepper.card.value
    stepper.play.value = stepper.play.min  # what the stop button does in the page
    assert stepper.slider.value == 0 and stepper.step == -1 and "Before any decision" in stepper.card.value
    for word in ("play", "pause", "stop", "loop"):
        assert word in stepper.play.tooltip and word in stepper.buttons_help.value
    assert stepper.slider.tooltip


def test_stepper_card_counts_kernels_not_views() -> None:
    def viewed(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x).reshape(4, 2, 8).permute(1, 0, 2).reshape(8, 8)
        return torch.sigmoid(y.t()).reshape(4, 16).sum(-1)

    ex = fl.explore(viewed, torch.randn(4, 16))
    fused = ex.fused
    views = sum(1 for g in fused.groups if g.kind == "view")
    assert views >= 2, fused.groups
    stepper = StageStepper(ex)
    card = text(stepper.card.value)
    kernels = len(fused.kernels)
    assert f"after this step: {kernels} kernel{'s' if kernels != 1 else ''} ({views} views" in card, card
    assert f"{len(fused.groups)} groups" not in card
    explorer = Explorer(ex, inductor=False, verify=False)
    # The dropdown lists kernels and extern calls; the table gives views one shared row.
    assert list(explorer.source.picker.options) == [g.name for g in fused.groups if g.kind != "view"]
    table = explorer.groups.value
    assert table.count("<tr data-row=") == len(fused.groups) - views + 1
    assert f"{kernels} kernels" in table and f"{views} views" in table
    # A view chosen in the graph: its code shows, the picker goes blank and comes back on the next kernel.
    view = next(g for g in fused.groups if g.kind == "view")
    explorer.graph.set_state({"selected": view.name})
    assert explorer.source.group == view.name and explorer.source.picker.value is None
    assert re.findall(r"<tr data-row='(\d+)'><td style='[^']*#fef9c3", explorer.groups.value) == [
        str(len(fused.groups) - views)]
    explorer.source.picker.value = fused.kernels[0].name
    assert explorer.source.group == fused.kernels[0].name == find_group_name(explorer)


def find_group_name(explorer: Explorer) -> str:
    from fusionlab.display.links import find_group

    group = find_group(explorer.fused, explorer.graph.selected)
    return group.name if group is not None else ""


def _row(variant: str, kernel: str, ms: float, timing: str, device: str) -> SimpleNamespace:
    return SimpleNamespace(variant=variant, kernel=kernel, median_ms=ms, timing=timing, device=device,
                           achieved_gbps=1.0, pct_of_copy_bw=0.1, launches=1, bytes=100)


def test_timing_plot_redraws_as_rows_stream_in() -> None:
    plot = TimingPlot(min_interval=0.0)
    assert plot.button.disabled and plot.static_png() is None
    assert "no timings yet" in plot.static_html()
    plot.add_row(_row("eager", "", 0.05, "measured", "cpu"))
    plot.add_row(_row("fusionlab", "", 0.003, "modelled", "H200"))
    plot.add_row(_row("fusionlab", "k0", 0.003, "modelled", "H200"))
    assert plot.rows_seen == 3 and len(plot.output.outputs) == 1
    assert plot.output.outputs[0]["data"]["image/png"]
    assert "modelled" in plot.note.value and "interpreter" in plot.note.value
    plot.views.value = "roofline"
    assert plot.view == "roofline"
    bundle = bundle_of(plot)
    assert WIDGET_MIME in bundle and "image/png" in bundle and "data:image/png;base64" in str(bundle["text/html"])
    with pytest.raises(ValueError, match="no exploration"):
        plot.run()


def test_timing_plot_view_set_from_python_moves_the_buttons() -> None:
    """Lessons 01 and 06 set `plot.view` in code: the highlighted button must follow, and every button still work."""
    plot = TimingPlot(min_interval=0.0)
    plot.add_row(_row("eager", "", 0.05, "measured", "cpu"))
    plot.add_row(_row("fusionlab", "k0", 0.003, "modelled", "H200"))
    plot.view = "roofline"
    # What the page highlights is the ToggleButtons' synced index.
    assert plot.views.value == "roofline" and plot.views.get_state()["index"] == 2
    assert plot.output.outputs[0]["data"]["text/plain"] == "<timing chart: roofline>"
    for name in ("programs", "per kernel", "roofline", "programs"):
        plot.views.set_state({"index": list(plot.views.options).index(name)})  # a click on that button
        assert plot.view == name and plot.output.outputs[0]["data"]["text/plain"] == f"<timing chart: {name}>"
    with pytest.raises(traitlets.TraitError):
        plot.view = "bars"


def test_timing_plot_runs_the_benchmark(ex: fl.Exploration) -> None:
    plot = TimingPlot(ex)
    report = plot.run(repeat=3)
    assert plot.rows == list(report.rows) and plot.report is report
    assert "BenchReport" in plot.status.value


def test_every_stage_has_a_widget(ex: fl.Exploration) -> None:
    kinds = [(ex.captured, StageView), (ex.decomposed, StageView), (ex.fused, StageStepper),
             (ex.generated, SourceCompare), (ex.compiled, StageView)]
    for stage, kind in kinds:
        widget = stage.show()
        assert isinstance(widget, kind)
        assert WIDGET_MIME in bundle_of(widget) and bundle_of(widget)["text/html"]
    with pytest.raises(TypeError, match="stage object"):
        stage_widget(object())


# ---- safety: names from user code are text everywhere --------------------------------------------------


class Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("<script>", nn.Parameter(torch.randn(32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * getattr(self, "<script>"), dim=-1) @ torch.ones(32, 4)


def test_user_names_are_escaped_in_every_widget() -> None:
    ex = fl.explore(Scripted(), torch.randn(4, 32))
    explorer = Explorer(ex, inductor=False, verify=False)
    explorer.stepper.stage = "captured"
    views = [explorer.title, explorer.selection, explorer.groups, explorer.decisions, explorer.edges,
             explorer.stepper.card, explorer.stepper.text, explorer.source.left, explorer.source.right]
    for widget in views:
        assert "<script" not in widget.value, widget
    assert "<script>" in text(explorer.stepper.text.value)  # shown, as text
    assert "<script" not in explorer.graph.svg and "<script" not in str(bundle_of(explorer)["text/html"])
    for stage in (ex.captured, ex.decomposed, ex.fused, ex.generated):
        assert "<script" not in str(bundle_of(stage.show())["text/html"])


# ---- no red stderr on a CPU-only machine ----------------------------------------------------------------

_RED_LINES = ("Could not find an active CPU backend", "No CUDA runtime is found", "CUDA initialization")


def test_explorer_on_a_cpu_prints_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    from fusionlab.display import session

    class WarnsLikeInductor:
        """Inductor asked for Triton source on a CPU warns that the kernels will not run: we asked for that."""

        def inductor(self, cpu_backend: str) -> str:
            warnings.warn("Could not find an active CPU backend. Generated kernels will not be executable!",
                          stacklevel=1)
            return f"view ({cpu_backend})"

    # pytest keeps warnings off stderr: record them, as a notebook would print them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert session.inductor_for(WarnsLikeInductor()) == "view (triton)"
        ex = fl.explore(block, torch.randn(8, 32), torch.randn(32, 16), torch.randn(16))
        explorer = ex.show()
        explorer.graph.set_state({"selected": "erf"})
    lines = capfd.readouterr().err.splitlines() + [str(warning.message) for warning in caught]
    assert not [line for line in lines if any(red in line for red in _RED_LINES)], lines


def test_benchmark_on_a_cpu_prints_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    ex = fl.explore(lambda x: torch.nn.functional.gelu(x) * 2, torch.randn(8, 32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TimingPlot(ex).run(repeat=1)
    lines = capfd.readouterr().err.splitlines() + [str(warning.message) for warning in caught]
    assert not [line for line in lines if any(red in line for red in _RED_LINES)], lines


def test_a_cuda_build_of_torch_on_a_cpu_looks_for_the_toolkit_quietly(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A CUDA wheel of torch on a laptop: the benchmark's Inductor (C++ on a CPU) imports cpp_extension, whose
    import asks CUDA and logs "No CUDA runtime is found". The benchmark counts eager's launches first: by then
    the lookup is done, quietly. (Only the lookup runs under the stand-in CUDA build: Dynamo would not.)"""
    import sys

    import torch.utils

    from fusionlab.measure import timing

    importlib.import_module("torch.utils.cpp_extension")  # the real one: put back when the test ends
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))  # a toolkit folder, as /usr/local/cuda often is
    monkeypatch.delitem(sys.modules, "torch.utils.cpp_extension")
    monkeypatch.delattr(torch.utils, "cpp_extension")
    quiet = getattr(timing, "quiet_cuda_toolkit_lookup", None)
    if quiet is not None:
        quiet.cache_clear()
    # torch's own handler may hold a stream an earlier test replaced: listen on the logger itself as well.
    records: list[logging.LogRecord] = []
    listener = logging.Handler()
    listener.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("torch.utils.cpp_extension").addHandler(listener)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert timing.count_launches(lambda: torch.ones(4) + 1, torch.device("cpu")) >= 1
            cpp_extension = importlib.import_module("torch.utils.cpp_extension")  # what Inductor's compile does
    finally:
        logging.getLogger("torch.utils.cpp_extension").removeHandler(listener)
        if quiet is not None:
            quiet.cache_clear()  # the next test's torch is the real one again
    lines = capfd.readouterr().err.splitlines() + [str(warning.message) for warning in caught]
    lines += [record.getMessage() for record in records]
    assert not [line for line in lines if any(red in line for red in _RED_LINES)], lines
    assert cpp_extension.CUDA_HOME == str(tmp_path)  # looked up, quietly


def test_show_refuses_an_option_it_does_not_take(ex: fl.Exploration) -> None:
    """An unknown option is an error that names it, not a keyword the widget swallows with a warning."""
    with pytest.raises(TypeError, match=r"got timings=.*to_html\(timings=False\)"):
        ex.show(timings=False)
