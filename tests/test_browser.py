"""A real browser: JupyterLab serves the tour, headless Chromium runs it, a click in the graph moves the sources.

JupyterLab listens on 127.0.0.1 only, with the token off (loopback, for this test). The notebook is copied to a
temporary folder first, so that autosave cannot write outputs into the repository. The screenshot of the
explorer is saved under test-artifacts/. The shared pieces are in tests/browser_support.py; Notebook 7 and Voila
are tests/test_frontends.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import fusionlab as fl
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
