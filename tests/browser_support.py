"""Shared pieces of the real-browser tests: a loopback Jupyter server in a temp folder, and headless Chromium.

The servers listen on 127.0.0.1 only, with the token off (loopback, for these tests). The tour is copied to a
temporary folder first, so that autosave cannot write outputs into the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
TOUR = "00_tour.ipynb"
CHROMIUM_ARGS = ["--disable-gpu", "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_settings(folder: Path) -> None:
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


def require_browser() -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("the real-browser test needs Debian's chromium: apt-get install chromium (scripts/setup.sh does)")
    pytest.importorskip("playwright", reason="pip install 'fusionlab[browser]'")


def tour_folder(base: Path) -> Path:
    """A fresh folder holding a copy of the tour (and nothing else)."""
    notebooks = base / "notebooks"
    notebooks.mkdir()
    shutil.copy(ROOT / "notebooks" / TOUR, notebooks / TOUR)
    return notebooks


def base_environment(base: Path) -> dict[str, str]:
    """The server's environment: Triton interpreted (CPU), settings and config kept inside the temp folder."""
    settings = base / "settings"
    write_settings(settings)
    return dict(os.environ, TRITON_INTERPRET="1", JUPYTERLAB_SETTINGS_DIR=str(settings),
                JUPYTER_CONFIG_DIR=str(base / "config"))


def _is_ready(ready: str | int) -> bool:
    try:
        if isinstance(ready, int):
            with socket.create_connection(("127.0.0.1", ready), timeout=2):
                return True
        with urllib.request.urlopen(ready, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def serve(command: list[str], *, base: Path, cwd: Path, env: dict[str, str], ready: str | int,
          name: str, timeout: float = 120) -> Iterator[None]:
    """Run `command` until the block ends; first wait until it is ready (fail with the log if not).

    `ready` is a URL that must answer 200, or a port on 127.0.0.1 that must accept a connection.
    """
    log_path = base / f"{name.lower().replace(' ', '_')}.log"
    log = log_path.open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if _is_ready(ready):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{name} did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def chromium_page(failure_shot: str, **page_options: Any) -> Iterator[Any]:
    """A fresh headless Chromium page; on an exception, a full-page screenshot under test-artifacts/."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    page_options.setdefault("viewport", {"width": 1600, "height": 2600})
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(**page_options)
        try:
            yield page
        except Exception:
            page.screenshot(path=str(ARTIFACTS / failure_shot), full_page=True)
            raise
        finally:
            browser.close()


def click_a_node_and_check_the_sources(page: Any, screenshot: str) -> None:
    """In the tour's explorer: the GELU is selected; clicking the layer norm's rsqrt node swaps the source pane."""
    explorer = page.locator(".fusionlab-explorer").first
    explorer.wait_for(state="visible", timeout=60_000)
    graph = explorer.locator(".fusionlab-graph-canvas svg").first
    graph.wait_for(state="visible", timeout=60_000)
    assert graph.locator("g.node").count() > 1
    pane = explorer.locator(".fusionlab-source-compare .fusionlab-panel").first
    before = pane.inner_text()
    assert "pointwise" in before  # the tour selected the last kernel (the GELU) in code

    # A node of the layer_norm's group: its kernel must replace the GELU's in the source pane.
    node = graph.locator("g.node", has_text="rsqrt").first
    node.scroll_into_view_if_needed()
    node.click()
    page.wait_for_function(
        """([before]) => {
            const pane = document.querySelector(".fusionlab-explorer .fusionlab-source-compare .fusionlab-panel");
            return pane && pane.innerText !== before;
        }""", arg=[before], timeout=60_000, polling=250)
    after = pane.inner_text()
    assert after != before and "reduction" in after and "rsqrt" in after
    assert explorer.locator(".fusionlab-graph-status").first.inner_text().startswith("selected: rsqrt")
    assert explorer.locator("g.node.fl-selected").count() == 1
    explorer.screenshot(path=str(ARTIFACTS / screenshot))
    assert (ARTIFACTS / screenshot).stat().st_size > 10_000


def run_all_cells(page: Any, name: str, *, open_timeout: int, run_timeout: int) -> None:
    """In a JupyterLab-based app (JupyterLab, Notebook 7): wait until notebook `name` is open with an idle kernel,
    run all cells (the command's promise resolves when the run ends), and fail on any traceback in the outputs."""
    page.wait_for_function(
        """(name) => {
            const app = window.jupyterapp;
            const widget = app && app.shell.currentWidget;
            const context = widget && widget.context;
            const kernel = widget && widget.sessionContext && widget.sessionContext.session
                && widget.sessionContext.session.kernel;
            return context && context.path === name && kernel && kernel.status === "idle";
        }""", arg=name, timeout=open_timeout, polling=500)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        timeout=run_timeout, polling=500)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                          ".jp-RenderedText:has-text('Traceback')")
    assert errors.count() == 0, errors.first.inner_text()
