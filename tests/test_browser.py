"""A real browser: JupyterLab serves the tour, headless Chromium runs it, a click in the graph moves the sources.

JupyterLab listens on 127.0.0.1 only, with the token off (loopback, for this test). The notebook is copied to a
temporary folder first, so that autosave cannot write outputs into the repository. The screenshot of the
explorer is saved under test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
TOUR = "00_tour.ipynb"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write_settings(folder: Path) -> None:
    """No news fetching (a closed network slows start-up), no update checks, every cell rendered."""
    settings = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                            "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for name, value in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value), encoding="utf-8")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail("the real-browser test needs Debian's chromium: apt-get install chromium (scripts/setup.sh does)")
    pytest.importorskip("playwright", reason="pip install 'fusionlab[browser]'")
    base = tmp_path_factory.mktemp("lab")
    notebooks, workspaces, settings = base / "notebooks", base / "workspaces", base / "settings"
    notebooks.mkdir()
    shutil.copy(ROOT / "notebooks" / TOUR, notebooks / TOUR)
    _write_settings(settings)
    port = _free_port()
    environment = dict(os.environ, TRITON_INTERPRET="1", JUPYTERLAB_SETTINGS_DIR=str(settings),
                       JUPYTER_CONFIG_DIR=str(base / "config"))
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--allow-root", "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={notebooks}",
               "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={workspaces}"]
    log = (base / "lab.log").open("w")
    server = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT, cwd=notebooks)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start:\n{(base / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_tour_runs_in_jupyterlab_and_a_graph_click_moves_the_sources(lab: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1600, "height": 2600})
        try:
            page.goto(f"{lab}/lab/tree/{TOUR}?reset", timeout=120_000)
            page.wait_for_function(
                """(name) => {
                    const app = window.jupyterapp;
                    const widget = app && app.shell.currentWidget;
                    const context = widget && widget.context;
                    const kernel = widget && widget.sessionContext && widget.sessionContext.session
                        && widget.sessionContext.session.kernel;
                    return context && context.path === name && kernel && kernel.status === "idle";
                }""", arg=TOUR, timeout=180_000, polling=500)
            # The command's promise resolves when the run ends; Playwright waits for it.
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(
                "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                timeout=480_000, polling=500)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                                  ".jp-RenderedText:has-text('Traceback')")
            assert errors.count() == 0, errors.first.inner_text()

            explorer = page.locator(".fusionlab-explorer").first
            explorer.wait_for(state="visible", timeout=60_000)
            graph = explorer.locator(".fusionlab-graph-canvas svg").first
            graph.wait_for(state="visible", timeout=60_000)
            pane = explorer.locator(".fusionlab-source-compare .fusionlab-panel").first
            before = pane.inner_text()
            assert "pointwise" in before  # the tour selected the last kernel (the GELU) in code

            # A node of the layer_norm's group: its kernel must replace the GELU's in the source pane.
            node = graph.locator("g.node", has_text="rsqrt").first
            node.scroll_into_view_if_needed()
            node.click()
            page.wait_for_function(
                """([before]) => {
                    const pane = document.querySelector(".fusionlab-explorer .fusionlab-source-compare "
                                                        + ".fusionlab-panel");
                    return pane && pane.innerText !== before;
                }""", arg=[before], timeout=60_000, polling=250)
            after = pane.inner_text()
            assert after != before and "reduction" in after and "rsqrt" in after
            assert explorer.locator(".fusionlab-graph-status").first.inner_text().startswith("selected: rsqrt")
            assert explorer.locator("g.node.fl-selected").count() == 1
            explorer.screenshot(path=str(ARTIFACTS / "browser_tour_explorer.png"))
            # The benchmark cell drew its charts into the TimingPlot's Output widget while it ran.
            timings = page.locator(".fusionlab-timing-plot").last
            assert timings.locator(".jp-OutputArea-output img").count() >= 1
            assert "BenchReport" in timings.inner_text()
            timings.screenshot(path=str(ARTIFACTS / "browser_tour_timings.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser_tour_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert (ARTIFACTS / "browser_tour_explorer.png").stat().st_size > 10_000
