"""A real browser: JupyterLab serves the tour, headless Chromium runs it, a click in the graph moves the sources.

JupyterLab listens on 127.0.0.1 only, with the token off (loopback, for this test). The notebook is copied to a
temporary folder first, so that autosave cannot write outputs into the repository. The screenshot of the
explorer is saved under test-artifacts/. The shared pieces are in tests/browser_support.py; Notebook 7 and Voila
are tests/test_frontends.py.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab import models
from fusionlab.widgets.base import frontend_source
from fusionlab.widgets.module_graph import ModuleGraph
from tests.browser_support import (
    ARTIFACTS,
    TOUR,
    base_environment,
    chromium_page,
    click_a_node_and_check_the_sources,
    free_port,
    require_browser,
    run_all_cells,
    serve,
    tour_folder,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_browser()
    base = tmp_path_factory.mktemp("lab")
    notebooks = tour_folder(base)
    port = free_port()
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--allow-root", "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={notebooks}",
               "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={base / 'workspaces'}"]
    url = f"http://127.0.0.1:{port}"
    with serve(command, base=base, cwd=notebooks, env=base_environment(base), ready=f"{url}/api/status",
               name="JupyterLab"):
        yield url


def test_tour_runs_in_jupyterlab_and_a_graph_click_moves_the_sources(lab: str) -> None:
    with chromium_page("browser_tour_failure.png") as page:
        page.goto(f"{lab}/lab/tree/{TOUR}?reset", timeout=120_000)
        run_all_cells(page, TOUR, open_timeout=180_000, run_timeout=480_000)

        click_a_node_and_check_the_sources(page, "browser_tour_explorer.png")
        # The benchmark cell drew its charts into the TimingPlot's Output widget while it ran.
        timings = page.locator(".fusionlab-timing-plot").last
        assert timings.locator(".jp-OutputArea-output img").count() >= 1
        assert "BenchReport" in timings.inner_text()
        timings.screenshot(path=str(ARTIFACTS / "browser_tour_timings.png"))


def _layer_norm_then_gelu(x: Any, weight: Any) -> Any:
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (32,)) @ weight)


def test_report_page_a_graph_click_filters_the_sources(tmp_path: Path) -> None:
    """The page `ex.to_html(path)` writes, opened from disk: a click on a node shows only its group's sources."""
    require_browser()
    ex = fl.explore(_layer_norm_then_gelu, torch.randn(4, 32), torch.randn(32, 16))
    path = tmp_path / "report.html"
    ex.to_html(str(path), inductor=False, timings=False)
    rsqrt_group = next(group.name for group in ex.fused.groups if any("rsqrt" in n for n in group.nodes))
    with chromium_page("browser_report_failure.png") as page:
        page.goto(path.as_uri())
        sections = page.locator(".fl-group")
        total = sections.count()
        assert total >= 2 and page.locator(".fl-group:visible").count() == total
        status = page.locator("#fl-status")
        assert status.inner_text() == "showing every group"

        node = page.locator("#fl-graph g.node", has_text="rsqrt").first
        node.click()
        assert status.inner_text() == f"showing group {rsqrt_group}"
        visible = page.locator(".fl-group:visible")
        assert visible.count() == 1 and visible.first.get_attribute("data-group") == rsqrt_group
        assert "rsqrt" in visible.first.inner_text()
        assert page.locator("#fl-graph g.fl-selected").count() == 1

        page.locator("#fl-show-all").click()
        assert page.locator(".fl-group:visible").count() == total
        assert status.inner_text() == "showing every group"


def test_model_page_a_click_opens_a_layer_and_the_chart_reads_its_time(tmp_path: Path) -> None:
    """The zoo's tiny GPT-2 page, folded by module: a click on layer h.0 opens it in place, a click on its label
    folds it, and the icicle reads the layer's (modelled) time."""
    require_browser()
    model, inputs = models.build("gpt2", size="tiny", train=False)
    ex = fl.explore(model, **inputs)
    path = tmp_path / "gpt2.html"
    ex.to_html(str(path), inductor=False, timings=False, progress=False)
    with chromium_page("browser_model_page_failure.png") as page:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        graph = page.locator("#fl-graph")
        status = page.locator("#fl-module-status")
        assert "folded into modules" in status.inner_text()
        assert graph.locator("g.cluster").count() == 2  # transformer and h are open; the layers are boxes
        layer = graph.locator("g.node", has_text="h.0").first
        assert "kernels" in (layer.text_content() or "")
        layer.click()
        assert status.inner_text() == "opened transformer.h.0; click its label to fold it"
        opened = graph.locator("g.cluster", has=page.locator("text", has_text=re.compile(r"^h\.0 · ")))
        assert opened.count() == 1 and graph.locator("g.node", has_text="h.0.attn").count() == 1
        graph.screenshot(path=str(ARTIFACTS / "browser_model_page_open_layer.png"))
        opened.locator("text").first.click()
        assert status.inner_text() == "folded transformer.h.0" and graph.locator("g.cluster").count() == 2
        cell = page.locator(".fl-icicle-cell[data-module='transformer.h.0'] title")
        assert re.fullmatch(r"transformer\.h\.0: [0-9.e-]+ ms \(modelled on H200\)", cell.text_content() or "")
        assert not errors


def test_module_graph_front_end_sends_clicks_zooms_pans_and_searches(tmp_path: Path) -> None:
    """The widget's own ES module, run in Chromium over a stand-in for anywidget's model: what it sends and sets."""
    require_browser()
    view = ModuleGraph(fl.explore(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), torch.randn(2, 8)))
    source = frontend_source("svg_tools.js") + frontend_source("module_graph.js")
    assert source.rstrip().endswith("export default { render };")
    script = source.rstrip().removesuffix("export default { render };") + "window.flWidget = { render };"
    state = {name: getattr(view, name) for name in ("svg", "dot", "message", "kinds", "status", "hide_plumbing",
                                                     "search")}
    harness = tmp_path / "module_graph.html"
    harness.write_text(
        "<!DOCTYPE html><html><body><div id='host'></div><script>" + script + "</script><script>"
        "window.state = " + json.dumps(state).replace("<", "\\u003c") + "; window.sent = []; window.saved = 0;"
        "const model = { get: (k) => window.state[k], set: (k, v) => { window.state[k] = v; },"
        " save_changes: () => { window.saved += 1; }, send: (m) => window.sent.push(m), on() {}, off() {} };"
        "window.flWidget.render({ model, el: document.getElementById('host') });</script></body></html>",
        encoding="utf-8")
    with chromium_page("browser_module_graph_failure.png", viewport={"width": 1000, "height": 900}) as page:
        page.goto(harness.as_uri())
        svg = page.locator(".fl-mg-canvas svg")
        assert "plumbing nodes hidden" in page.locator(".fl-mg-status").inner_text()
        box = next(dot_id for dot_id, kind in view.kinds.items() if kind == "module")
        page.locator(".fl-mg-canvas g.node", has=page.locator(f"title:text-is('{box}')")).click()
        assert page.evaluate("window.sent") == [{"event": "click", "id": box}]
        before = svg.get_attribute("viewBox")
        svg.hover()
        page.mouse.wheel(0, -300)  # zoom in about the pointer
        zoomed = svg.get_attribute("viewBox")
        assert zoomed != before and float(zoomed.split()[2]) < float(before.split()[2])  # type: ignore[union-attr]
        bounds = svg.bounding_box()
        assert bounds is not None
        page.mouse.move(bounds["x"] + 5, bounds["y"] + 5)
        page.mouse.down()
        page.mouse.move(bounds["x"] + 80, bounds["y"] + 60, steps=5)
        page.mouse.up()
        panned = svg.get_attribute("viewBox")
        assert panned != zoomed and panned.split()[2:] == zoomed.split()[2:]  # type: ignore[union-attr]
        assert len(page.evaluate("window.sent")) == 1  # the drag did not click
        page.locator(".fl-mg-fit").click()
        assert svg.get_attribute("viewBox") == before
        page.locator(".fl-mg-search").fill("relu")
        page.locator(".fl-mg-search").press("Enter")
        assert page.evaluate("window.state.search") == "relu" and page.evaluate("window.saved") == 1
        page.locator(".fl-mg-plumbing").uncheck()
        assert page.evaluate("window.state.hide_plumbing") is False
        page.locator(".fl-mg-reset").click()
        assert page.evaluate("window.sent")[-1] == {"event": "reset"}


def test_profile_page_a_click_opens_a_layer_and_the_chart_reads_its_time(tmp_path: Path) -> None:
    """`fl.profile(...).to_html(path)` of the zoo's tiny GPT-2: the graph folded by module opens layer h.0 on a click,
    and the icicle reads the layer's measured eager time."""
    require_browser()
    model, inputs = models.build("gpt2", size="tiny", train=False)
    path = fl.profile(model, **inputs, inductor=False, rounds=2).to_html(tmp_path / "profile.html")
    with chromium_page("browser_profile_page_failure.png") as page:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        graph = page.locator("#fl-graph")
        graph.locator("g.node", has_text="h.0").first.click()
        assert page.locator("#fl-module-status").inner_text() == "opened transformer.h.0; click its label to fold it"
        assert graph.locator("g.node", has_text="h.0.mlp").count() == 1
        time_text = page.locator(".fl-icicle-cell[data-module='transformer.h.0'] title").first.text_content() or ""
        match = re.fullmatch(r"transformer\.h\.0: ([0-9.e-]+) ms \(eager.*\)", time_text)
        assert match is not None and float(match.group(1)) > 0, time_text
        page.screenshot(path=str(ARTIFACTS / "browser_profile_page.png"), full_page=True)
        assert not errors
