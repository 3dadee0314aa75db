"""A real browser: JupyterLab serves the tour, headless Chromium runs it, a click in the graph moves the sources.

JupyterLab listens on 127.0.0.1 only, with the token off (loopback, for this test). The notebook is copied to a
temporary folder first, so that autosave cannot write outputs into the repository. The screenshot of the
explorer is saved under test-artifacts/. The shared pieces are in tests/browser_support.py; Notebook 7 and Voila
are tests/test_frontends.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

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
