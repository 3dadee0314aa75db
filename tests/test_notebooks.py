"""Every notebook runs top to bottom, headless (nbclient, TRITON_INTERPRET=1), and shows widgets.

Slow (about two minutes for the course) but part of the default test command.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from fusionlab import notebooks_run
from fusionlab.notebooks_run import WIDGET_MIME, run_notebook

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
COURSE = ("01_why_fusion_pays", "02_pointwise_chains", "03_reductions", "04_inside_inductor",
          "05_write_your_own_policy", "06_profile_a_gpt_block")


def test_the_tour_and_the_course_are_there() -> None:
    names = [path.stem for path in NOTEBOOKS]
    assert names[0] == "00_tour" and set(COURSE) <= set(names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name}: strip the outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_headless_and_shows_widgets(path: Path, tmp_path: Path) -> None:
    result = run_notebook(path, timeout=600, save=tmp_path)
    assert result.widget_outputs >= 1, f"{path.name} produced no widget output"
    saved = nbformat.read(tmp_path / path.name, as_version=4)
    views = [output for cell in saved.cells if cell.cell_type == "code" for output in cell.outputs
             if WIDGET_MIME in output.get("data", {})]
    assert all(output["data"].get("text/html") for output in views), "every widget carries a static fallback"
    if any("plot.run()" in cell.source for cell in saved.cells):  # the finished charts are kept for GitHub
        assert any("data:image/png;base64" in output["data"]["text/html"] for output in views)
    assert result.seconds < 240, f"{path.name} took {result.seconds:.0f} s: keep notebooks small"


def test_the_runner_fails_on_a_cell_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import os\nassert os.environ['TRITON_INTERPRET'] == '1'"),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ])
    path = tmp_path / "broken.ipynb"
    nbformat.write(broken, path)
    assert notebooks_run.main([str(path)]) == 1
    assert "boom" in capsys.readouterr().err
    assert notebooks_run.main([str(tmp_path / "missing.ipynb")]) == 1
