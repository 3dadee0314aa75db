"""fusionlab.display: DOT/SVG of the graph, highlighted sources, diffs, tables, links between stages, charts."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab.display import graph as graph_module
from fusionlab.display import render as render_module
from fusionlab.display.graph import dot_string, draw_graph, graph_blocks
from fusionlab.display.links import extern_calls, find_group, inductor_kernels_of, kernel_of_group, wrapper_sections
from fusionlab.display.plots import figure_png, figure_svg, kernel_figure, roofline_figure, timing_figure, timing_panels
from fusionlab.display.render import INSTALL_DOT, graph_html, render_svg
from fusionlab.display.source import diff_html, highlight_html, source_panel
from fusionlab.display.tables import Html, decisions_table, edges_table, frame_table, groups_table, html_table
from fusionlab.measure.workloads import get

needs_dot = pytest.mark.skipif(render_module.find_dot() is None, reason="Graphviz's dot is not installed")


def block(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    normed = torch.nn.functional.layer_norm(x, (x.shape[-1],))
    return torch.nn.functional.gelu(normed @ weight + bias)


@pytest.fixture(scope="module")
def ex() -> fl.Exploration:
    return fl.explore(block, torch.randn(8, 32), torch.randn(32, 16), torch.randn(16))


class Scripted(nn.Module):
    """A module whose parameter is named like markup: every view must show it as text."""

    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("<script>", nn.Parameter(torch.randn(32)))
        self.register_parameter('a"b\\c', nn.Parameter(torch.randn(32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * getattr(self, "<script>") + getattr(self, 'a"b\\c'))


# ---- the graph ------------------------------------------------------------------------------------------


def test_one_cluster_per_kernel_group_in_its_own_colour(ex: fl.Exploration) -> None:
    drawing = draw_graph(ex.fused)
    clusters = {i: n for i, n in drawing.names.items() if drawing.kinds[i] == "group"}
    assert sorted(clusters.values()) == sorted(g.name for g in ex.fused.kernels)
    fills = re.findall(r'subgraph cluster_\d+ \{\n(?:    \w+=.*\n)*?    fillcolor="(#[0-9a-f]+)"', drawing.dot)
    assert len(fills) == len(ex.fused.kernels) and len(set(fills)) == len(fills)


def test_extern_ops_are_drawn_differently(ex: fl.Exploration) -> None:
    drawing = draw_graph(ex.fused)
    extern = next(g for g in ex.fused.groups if g.kind == "extern").nodes[0]
    line = next(line for line in drawing.dot.splitlines() if line.strip().startswith(f"{drawing.id_of(extern)} "))
    assert 'shape="box3d"' in line and "extern" in line
    pointwise = next(n.name for n in ex.decomposed.graph.nodes if n.kind == "pointwise")
    other = next(line for line in drawing.dot.splitlines() if line.strip().startswith(f"{drawing.id_of(pointwise)} "))
    assert "box3d" not in other


def test_edges_carry_shape_and_dtype_and_say_where_the_value_goes(ex: fl.Exploration) -> None:
    dot = draw_graph(ex.fused).dot
    edges = [line for line in dot.splitlines() if "->" in line and "tooltip" in line]
    assert edges and all("float32[" in line for line in edges)
    assert any("stays in registers" in line for line in edges)
    assert any("written to memory" in line for line in edges)
    assert 'label="float32' in draw_graph(ex.fused, edge_labels=True).dot


def test_replay_marks_the_decision_and_maps_clusters_to_final_groups(ex: fl.Exploration) -> None:
    fused = ex.fused
    start = graph_blocks(fused, -1)
    assert len(start) == len([n for n in ex.decomposed.graph.nodes if n.kind != "input"])
    step = next(d.step for d in fused.decisions if d.fused)
    drawing = draw_graph(fused, step=step)
    finals = {g.name for g in fused.groups}
    assert {drawing.names[i] for i, k in drawing.kinds.items() if k == "group"} <= finals
    decision = fused.decisions[step]
    edge = f"{drawing.id_of(decision.producer)} -> {drawing.id_of(decision.consumer)} "
    assert any(line.strip().startswith(edge) and "#16a34a" in line for line in drawing.dot.splitlines())
    assert len(graph_blocks(fused, len(fused.decisions) - 1)) == len(fused.groups)


def test_captured_level_and_selection(ex: fl.Exploration) -> None:
    drawing = draw_graph(ex.fused, level="captured")
    assert set(drawing.names.values()) >= {"native_layer_norm", "mm", "gelu"}
    group = ex.fused.kernels[0].name
    selected = draw_graph(ex.fused, selected=group).dot
    assert selected.count('color="#f59e0b"') == 1
    with pytest.raises(ValueError, match="level"):
        draw_graph(ex.fused, level="kernels")
    with pytest.raises(ValueError, match="Fused"):
        draw_graph(ex.decomposed, step=0)


def test_dot_strings_cannot_break_out() -> None:
    assert dot_string('a"b') == '"a\\"b"'
    assert dot_string("a\\b") == '"a\\\\b"'
    assert dot_string("line\nnext\x01") == '"line\\nnext "'
    assert dot_string("<script>") == '"<script>"'  # quoted: not an HTML-like label


@needs_dot
def test_user_names_are_escaped_in_the_svg() -> None:
    ex = fl.explore(Scripted(), torch.randn(4, 32))
    for level in ("captured", "decomposed"):
        rendered = render_svg(draw_graph(ex.fused, level=level).dot)
        assert rendered.svg is not None and rendered.svg.startswith("<svg")
        assert "<script" not in rendered.svg
    assert "&lt;script&gt;" in render_svg(draw_graph(ex.fused, level="captured").dot).svg  # type: ignore[operator]


@needs_dot
def test_svg_titles_are_the_drawing_ids(ex: fl.Exploration) -> None:
    drawing = draw_graph(ex.fused)
    svg = render_svg(drawing.dot).svg
    assert svg is not None
    titles = set(re.findall(r"<title>([^<]*)</title>", svg))
    assert set(drawing.names) <= titles


def test_missing_dot_says_how_to_install_and_keeps_the_dot_text(monkeypatch: pytest.MonkeyPatch,
                                                                 ex: fl.Exploration) -> None:
    monkeypatch.setattr(render_module, "find_dot", lambda: None)
    drawing = draw_graph(ex.fused)
    rendered = render_svg(drawing.dot)
    assert rendered.svg is None and rendered.message == INSTALL_DOT and "apt-get install graphviz" in INSTALL_DOT
    page = graph_html(rendered)
    assert "apt-get install graphviz" in page and "digraph fusionlab" in page and "&quot;" in page


def test_graph_of_a_non_stage_is_refused() -> None:
    with pytest.raises(TypeError, match="Captured, Decomposed or Fused"):
        graph_module.resolve_stage(object())


# ---- sources, diffs, tables --------------------------------------------------------------------------


def test_highlight_uses_inline_styles_and_escapes() -> None:
    page = highlight_html("x = '<script>alert(1)</script>'\n")
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "style=" in page and "class=\"k" not in page
    assert "&lt;x&gt;" in highlight_html("#include <x>\n", "cpp")
    assert "&lt;b&gt;" in source_panel("<b>", "pass", note="n")


def test_diff_marks_changes_inline_and_escapes_labels() -> None:
    page = diff_html("a = 1\nb = 2\n", "a = 1\nb = 3\n<i>\n", "<ours>", "theirs")
    assert "&lt;ours&gt;" in page and "<ours>" not in page
    assert "&lt;i&gt;" in page
    assert 'class="diff_' not in page and "background:#fef9c3" in page
    assert 'href="#difflib' not in page


def test_tables_escape_cells_and_highlight_rows(ex: fl.Exploration) -> None:
    page = html_table(["<a>"], [["<b>"], [Html("<i>ok</i>")]], highlight=[1])
    assert "&lt;a&gt;" in page and "&lt;b&gt;" in page and "<i>ok</i>" in page
    assert page.count("background:#fef9c3") == 1
    group = ex.fused.kernels[0]
    shaded = re.findall(r"<tr data-row='(\d+)'><td style='[^']*#fef9c3", groups_table(ex.fused, selected=group.name))
    assert shaded == [str([g for g in ex.fused.groups if g.kind != "view"].index(group))]
    assert decisions_table(ex.fused, upto=2).count("<tr data-row") == 3
    assert "registers" in edges_table(ex.fused) and "memory" in edges_table(ex.fused)
    assert "&lt;x&gt;" in frame_table([{"name": "<x>", "value": 1.23456789}])


# ---- links between stages -------------------------------------------------------------------------------


def test_find_group_by_group_node_or_aten_name(ex: fl.Exploration) -> None:
    kernel = ex.fused.kernels[0]
    assert find_group(ex.fused, kernel.name) == kernel
    assert find_group(ex.fused, kernel.nodes[-1]) == kernel
    assert find_group(ex.fused, "native_layer_norm") == kernel
    assert find_group(ex.fused, "x") is None and find_group(ex.fused, "") is None
    source = kernel_of_group(ex.generated, kernel.name)
    assert source is not None and "@triton.jit" in source.source


def test_wrapper_sections_cover_every_group() -> None:
    module, inputs = get("gpt_block").build("cpu")
    ex = fl.explore(module, *inputs)
    sections = wrapper_sections(ex.generated)
    assert list(sections) == [g.name for g in ex.fused.groups]
    for group in ex.fused.groups:
        if group.is_kernel:
            assert f"launch({kernel_of_group(ex.generated, group.name).name}," in sections[group.name]  # type: ignore[union-attr]
        elif group.kind == "extern":
            assert "# extern:" in sections[group.name]
    assert len(extern_calls(ex.generated)) == sum(g.kind == "extern" for g in ex.fused.groups)


def test_inductor_kernels_of_a_group_are_those_sharing_aten_nodes(ex: fl.Exploration) -> None:
    kernels = (SimpleNamespace(name="k0", node_names=("gelu",)), SimpleNamespace(name="k1", node_names=("mm", "add")),
               SimpleNamespace(name="k2", node_names=("native_layer_norm",)))
    view = SimpleNamespace(kernels=kernels)
    pointwise = find_group(ex.fused, "gelu")
    assert pointwise is not None
    names = [k.name for k in inductor_kernels_of(pointwise, view)]
    assert names[0] == "k0" and "k2" not in names
    assert inductor_kernels_of(pointwise, None) == ()


# ---- charts -------------------------------------------------------------------------------------------


def _row(variant: str, kernel: str, ms: float | None, timing: str, device: str, gbps: float | None = None,
         pct: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(variant=variant, kernel=kernel, median_ms=ms, timing=timing, device=device,
                           achieved_gbps=gbps, pct_of_copy_bw=pct, launches=1, bytes=1000)


ROWS = [
    _row("reference", "", 0.001, "modelled", "cpu"),
    _row("eager", "", 0.05, "measured", "cpu"),
    _row("fusionlab", "", 0.003, "modelled", "H200", 100.0, 2.4),
    _row("fusionlab", "pointwise_0_add", 0.003, "modelled", "H200", 100.0, 2.4),
    _row("inductor", "", 0.02, "measured", "cpu"),
    _row("inductor", "", 0.003, "modelled", "H200", 90.0, 2.1),
]


def test_measured_modelled_and_recorded_panels_are_kept_apart() -> None:
    recorded = [{"gpu": "H200", "dtype": "bfloat16", "shape": "8192x8192", "eager_ms": "0.25",
                 "fusionlab_ms": "0.1", "inductor_ms": "bad"}]
    panels = timing_panels(ROWS, recorded)
    titles = [p.title for p in panels]
    assert titles[0].startswith("measured on cpu") and "wall clock" in titles[0]
    assert titles[1].startswith("modelled on H200") and "not a measurement" in titles[1]
    assert titles[2].startswith("recorded on H200")
    assert [b.variant for b in panels[0].bars] == ["eager", "inductor"] and panels[0].floor_ms == 0.001
    assert [b.variant for b in panels[2].bars] == ["eager", "fusionlab"]  # the unreadable value is left out


def test_charts_render_from_partial_rows() -> None:
    for rows in ([], ROWS[:2], ROWS):
        for figure in (timing_figure(rows), kernel_figure(rows), roofline_figure(rows)):
            assert figure_png(figure).startswith(b"\x89PNG")
    assert figure_svg(timing_figure(ROWS)).startswith("<svg")
