"""Real browsers on the other front ends of issue 5: Notebook 7 and Voila run the tour; a graph click moves sources.

JupyterLab itself is tests/test_browser.py; the shared pieces (servers on 127.0.0.1 with the token off, headless
Chromium, the click check) are in tests/browser_support.py. Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser_support import (
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
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_browser()
    pytest.importorskip("notebook", minversion="7", reason="pip install 'fusionlab[notebook]' (notebook>=7)")
    base = tmp_path_factory.mktemp("notebook7")
    notebooks = tour_folder(base)
    port = free_port()
    command = [sys.executable, "-m", "jupyter", "notebook", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--allow-root", "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={notebooks}",
               "--JupyterNotebookApp.expose_app_in_browser=True",
               f"--JupyterNotebookApp.workspaces_dir={base / 'workspaces'}"]
    url = f"http://127.0.0.1:{port}"
    with serve(command, base=base, cwd=notebooks, env=base_environment(base), ready=f"{url}/api/status",
               name="Notebook 7"):
        yield url


def test_tour_runs_in_notebook7_and_a_graph_click_moves_the_sources(notebook7: str) -> None:
    with chromium_page("frontends_notebook7_failure.png") as page:
        page.goto(f"{notebook7}/notebooks/{TOUR}", timeout=120_000)
        # Notebook 7 is a JupyterLab app with one main widget: the notebook panel.
        run_all_cells(page, TOUR, open_timeout=120_000, run_timeout=240_000)
        click_a_node_and_check_the_sources(page, "frontends_notebook7_explorer.png")


@pytest.fixture(scope="module")
def voila(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_browser()
    pytest.importorskip("voila", reason="pip install 'fusionlab[notebook]' (voila)")
    base = tmp_path_factory.mktemp("voila")
    notebooks = tour_folder(base)
    port = free_port()
    command = [sys.executable, "-m", "voila", str(Path(notebooks) / TOUR), "--no-browser", f"--port={port}",
               "--Voila.ip=127.0.0.1"]
    url = f"http://127.0.0.1:{port}"
    # Only a connection: a GET of the page would start a kernel and execute the notebook.
    with serve(command, base=base, cwd=notebooks, env=base_environment(base), ready=port, name="Voila"):
        yield url


def test_tour_runs_in_voila_and_a_graph_click_moves_the_sources(voila: str) -> None:
    with chromium_page("frontends_voila_failure.png") as page:
        # Voila executes every cell for the page, then the widget manager renders the outputs.
        page.goto(voila, timeout=240_000)
        page.locator(".fusionlab-explorer .fusionlab-graph-canvas svg g.node").first.wait_for(
            state="attached", timeout=240_000)
        assert page.locator("text=Traceback").count() == 0
        click_a_node_and_check_the_sources(page, "frontends_voila_explorer.png")
