"""Every notebook runs top to bottom, headless (nbclient, TRITON_INTERPRET=1), shows widgets and writes nothing to
stderr; the lessons' claims hold for the code they show; the published executed copies are up to date.

The runs are slow (minutes for the course) but part of the default test command; the rest is cheap.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
import torch

import fusionlab as fl
from fusionlab import notebooks_run
from fusionlab.exercises import check_pointwise_only, check_register_budget
from fusionlab.lessons import row_passes, times
from fusionlab.notebooks_run import PUBLISHED, WIDGET_MIME, machine_paths, run_notebook, source_digest, stale_copies

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
COURSE = ("01_why_fusion_pays", "02_pointwise_chains", "03_reductions", "04_inside_inductor",
          "05_write_your_own_policy", "06_profile_a_gpt_block", "07_profile_a_real_model")


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
    assert not stderr_lines(saved), f"{path.name} wrote to stderr: {stderr_lines(saved)[:5]}"


_PROGRESS = re.compile(r"\d+%\||it/s\]|s/it\]|\d+/\d+ \[")  # tqdm's bars also go to stderr


def stderr_lines(notebook: nbformat.NotebookNode) -> list[str]:
    """Lines a notebook's cells wrote to stderr, progress bars left out."""
    lines = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                lines += [line for line in re.split(r"[\r\n]", output["text"]) if line.strip()
                          and not _PROGRESS.search(line)]
    return lines


def test_stderr_lines_leave_progress_bars_out() -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
    notebook.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr", text=(
        "benchmark f:  50%|#####     | 3/6 [00:01<00:01,  2.0it/s]\r"
        "/x/interpreter.py:599: RuntimeWarning: invalid value encountered in subtract\n"))]
    assert stderr_lines(notebook) == ["/x/interpreter.py:599: RuntimeWarning: invalid value encountered in subtract"]


def test_the_runner_fails_on_a_cell_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import os, torch\n"
                                  "assert os.environ.get('TRITON_INTERPRET') == (None if torch.cuda.is_available() "
                                  "else '1')\nimport fusionlab\nassert fusionlab.__file__ == " +
                                  repr(str(Path(notebooks_run.__file__).with_name("__init__.py")))),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ])
    path = tmp_path / "broken.ipynb"
    nbformat.write(broken, path)
    assert notebooks_run.main([str(path)]) == 1
    assert "boom" in capsys.readouterr().err
    assert notebooks_run.main([str(tmp_path / "missing.ipynb")]) == 1


def _notebook(stem: str) -> nbformat.NotebookNode:
    return nbformat.read(next(p for p in NOTEBOOKS if p.stem == stem), as_version=4)


def _definitions(source: str) -> str:
    """A cell's source without its trailing expressions (the checks it displays)."""
    tree = ast.parse(source)
    while tree.body and isinstance(tree.body[-1], ast.Expr):
        tree.body.pop()
    return ast.unparse(tree)


def test_lesson_3_says_what_the_looped_kernel_does() -> None:
    lesson = _notebook("03_reductions")
    text = next(c.source for c in lesson.cells if c.cell_type == "markdown" and "Rows too long" in c.source)
    shape = re.search(r"x = torch.randn\(.*? else (\d+), (\d+)", "".join(c.source for c in lesson.cells))
    assert shape, "lesson 3 builds x = torch.randn(... else ROWS, COLUMNS) on a CPU"
    x = torch.randn(int(shape.group(1)), int(shape.group(2)))
    kernel = fl.explore(lambda t: torch.softmax(t, dim=-1), x, looped_reductions=True).generated.kernels[0]
    passes = row_passes(kernel)
    words = {1: "one loop", 2: "two loops", 3: "three loops", 4: "four loops"}
    flat = " ".join(text.split())
    assert f"it has {words[len(passes.passes)]} over each row" in flat, (passes, flat)
    assert f"reads the row {times(passes.reads)} and writes it {times(passes.writes)}" in flat, (passes, flat)


def test_lesson_5_has_stubs_that_fail_and_no_solution_that_runs() -> None:
    lesson = _notebook("05_write_your_own_policy")
    code = [c.source for c in lesson.cells if c.cell_type == "code"]
    assert not any("return Verdict(True" in source for source in code), "a solution runs under Run All"
    namespace: dict[str, object] = {}
    exec(code[0], namespace)  # the imports
    first = next(s for s in code if "class PointwiseOnly" in s)
    second = next(s for s in code if "class Budget" in s)
    exec(_definitions(first), namespace)
    exec(_definitions(second), namespace)
    assert "check_pointwise_only(PointwiseOnly())" in first and "check_register_budget(Budget(6)" in second
    assert not check_pointwise_only(namespace["PointwiseOnly"]())  # type: ignore[operator]
    budget = check_register_budget(namespace["Budget"](6), max_primitives=6)  # type: ignore[operator]
    failed = [message for ok, message in budget.checks if not ok]
    assert failed and all("budget 6" in message for message in failed), failed


def test_the_published_course_is_up_to_date_and_small() -> None:
    problems = stale_copies()
    assert not problems, "run `python -m fusionlab.notebooks_run --publish`: " + "; ".join(problems)
    copies = sorted(PUBLISHED.glob("*.ipynb"))
    assert sum(path.stat().st_size for path in copies) < 4_000_000, "keep the published course small"
    for path in copies:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        assert notebook["metadata"]["fusionlab"]["source_digest"] == source_digest(notebook)
        assert "widgets" not in notebook["metadata"] and not machine_paths(notebook), path.name
        outputs = [o for cell in notebook["cells"] if cell["cell_type"] == "code" for o in cell["outputs"]]
        assert outputs and all(WIDGET_MIME not in o.get("data", {}) for o in outputs), path.name


def test_stale_copies_sees_a_changed_cell(tmp_path: Path) -> None:
    sources, published = tmp_path / "notebooks", tmp_path / "executed"
    sources.mkdir()
    published.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(notebook, sources / "a.ipynb")
    assert stale_copies(sources, published) == ["a.ipynb: no executed copy in executed/"]
    notebook.metadata["fusionlab"] = {"source_digest": source_digest(notebook)}
    nbformat.write(notebook, published / "a.ipynb")
    assert stale_copies(sources, published) == []
    notebook.cells[0].source = "1 + 2"
    nbformat.write(notebook, sources / "a.ipynb")
    assert stale_copies(sources, published) == ["a.ipynb: its cells changed since the executed copy was made"]
    (sources / "a.ipynb").unlink()
    assert stale_copies(sources, published) == ["a.ipynb: an executed copy with no source notebook"]
