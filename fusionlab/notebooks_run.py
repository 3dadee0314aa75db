"""Execute notebooks headless, top to bottom, and fail on the first cell error.

The kernel runs with `TRITON_INTERPRET=1` in its environment on a machine without a GPU (so Triton's interpreter
is the default there; with a GPU, Triton compiles) and its working folder is the notebook's. Used by
`scripts/lab.sh --headless` and the tests.

    $ python -m fusionlab.notebooks_run notebooks/00_tour.ipynb
    $ python -m fusionlab.notebooks_run notebooks/*.ipynb --save executed/
    $ python -m fusionlab.notebooks_run --publish          # the course, executed, into course/executed/

`--publish` writes executed copies that read on GitHub (widget views keep only their static HTML and PNG
fallbacks; widget state is dropped) and stamps each with a digest of its source cells, so a test can tell, without
running anything, that a copy is stale (`stale_copies`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NotebookRun", "PUBLISHED", "SOURCES", "WIDGET_MIME", "machine_paths", "main", "publish",
           "run_notebook", "source_digest", "stale_copies"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_ROOT = Path(__file__).resolve().parent.parent
SOURCES = _ROOT / "notebooks"
PUBLISHED = _ROOT / "course" / "executed"
_MACHINE_PATH = re.compile(r"(/root/|/home/|/tmp/|/work/|/Users/|/var/folders/|[A-Z]:\\\\Users)")


@dataclass(frozen=True)
class NotebookRun:
    """An executed notebook: how long it took and how many widget views its outputs hold."""

    path: Path
    seconds: float
    widget_outputs: int
    notebook: Any

    def __repr__(self) -> str:
        return f"NotebookRun({self.path.name}: {self.seconds:.1f} s, {self.widget_outputs} widget outputs)"


def kernel_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, TRITON_INTERPRET=1 where there is no GPU, and `extra`; the kernel imports this
    fusionlab. With a GPU the variable is removed: set for the whole kernel, it would make Inductor's Triton kernels
    run (and be timed) in the interpreter; fusionlab picks the interpreter per kernel by itself."""
    import torch

    environment = dict(os.environ)
    if torch.cuda.is_available():
        environment.pop("TRITON_INTERPRET", None)
    else:
        environment["TRITON_INTERPRET"] = "1"
    # The kernel starts in the notebook's folder: put this checkout first, so it runs the code under test
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), environment.get("PYTHONPATH")) if p)
    environment.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    environment.update(extra or {})
    return environment


def count_widget_outputs(notebook: Any) -> int:
    return sum(1 for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []) if WIDGET_MIME in output.get("data", {}))


def run_notebook(path: str | Path, timeout: int = 600, save: str | Path | None = None,
                 environment: dict[str, str] | None = None) -> NotebookRun:
    """Run every cell of `path`; raises nbclient's CellExecutionError on a failing cell."""
    import nbformat
    from nbclient import NotebookClient

    source = Path(path).resolve()
    notebook = nbformat.read(source, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(source.parent)}}, record_timing=False)
    start = time.perf_counter()
    client.execute(env=kernel_environment(environment))
    seconds = time.perf_counter() - start
    if save is not None:
        target = Path(save)
        target = target / source.name if target.is_dir() or not target.suffix else target
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)
    return NotebookRun(source, seconds, count_widget_outputs(notebook), notebook)


def source_digest(notebook: Any) -> str:
    """sha256 of a notebook's cells (type and source): what an executed copy was made from."""
    cells = [[cell["cell_type"], "".join(cell["source"])] for cell in notebook["cells"]]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def stale_copies(sources: Path = SOURCES, published: Path = PUBLISHED) -> list[str]:
    """Each source notebook with no executed copy, or whose cells changed since its copy was made; each copy
    with no source. Empty when the published course is up to date."""
    problems = []
    names = {path.name for path in sources.glob("*.ipynb")} | {path.name for path in published.glob("*.ipynb")}
    for name in sorted(names):
        source, copy = sources / name, published / name
        if not copy.exists():
            problems.append(f"{name}: no executed copy in {published.name}/")
        elif not source.exists():
            problems.append(f"{name}: an executed copy with no source notebook")
        else:
            stamp = _read_json(copy).get("metadata", {}).get("fusionlab", {}).get("source_digest")
            if stamp != source_digest(_read_json(source)):
                problems.append(f"{name}: its cells changed since the executed copy was made")
    return problems


def machine_paths(notebook: Any) -> list[str]:
    """Absolute paths of the machine that ran a notebook, found in its outputs (they must not be published)."""
    found = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            text = json.dumps(output, ensure_ascii=False)
            found += [text[max(0, m.start() - 30):m.end() + 30] for m in _MACHINE_PATH.finditer(text)]
    return found


def _for_github(notebook: Any, source: Path) -> None:
    """Keep what renders without a kernel: widget views become their static HTML/PNG; widget state goes."""
    import torch
    import triton

    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_MIME, None)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "a CPU (kernels modelled, not timed)"
    notebook.metadata["fusionlab"] = {"source": f"notebooks/{source.name}", "source_digest": source_digest(
        notebook), "executed_on": device, "torch": torch.__version__, "triton": triton.__version__}


def publish(paths: Sequence[str | Path] = (), folder: str | Path = PUBLISHED, timeout: int = 600) -> list[Path]:
    """Execute each notebook (default: every one in notebooks/) and write a GitHub-readable copy to `folder`."""
    import nbformat

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in [Path(p) for p in paths] or sorted(SOURCES.glob("*.ipynb")):
        result = run_notebook(path, timeout)
        _for_github(result.notebook, path)
        leaks = machine_paths(result.notebook)
        if leaks:
            raise ValueError(f"{path.name}: its outputs name paths of this machine ({leaks[0]!r}): print names "
                             "relative to the project, then publish again")
        nbformat.write(result.notebook, target / path.name)
        written.append(target / path.name)
        print(f"{path.name}: published in {result.seconds:.1f} s, "
              f"{(target / path.name).stat().st_size / 1e3:.0f} kB", flush=True)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusionlab.notebooks_run",
                                     description="Execute notebooks headless (Triton's interpreter if no GPU); fail "
                                                 "on any error.")
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: 600)")
    parser.add_argument("--save", default=None, help="folder to write the executed notebooks to")
    parser.add_argument("--publish", action="store_true",
                        help="write GitHub-readable executed copies (default: every notebook) to course/executed/")
    arguments = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    if arguments.publish:
        try:
            publish(arguments.notebooks, timeout=arguments.timeout)
        except (CellExecutionError, ValueError) as error:
            print(f"publishing failed:\n{error}", file=sys.stderr)
            return 1
        return 0
    if not arguments.notebooks:
        parser.error("name the notebooks to run (or --publish)")

    failed = 0
    for name in arguments.notebooks:
        if not Path(name).is_file():
            print(f"{name}: no such notebook", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: running ...", flush=True)
        try:
            result = run_notebook(name, arguments.timeout, arguments.save)
        except CellExecutionError as error:
            print(f"{name}: FAILED\n{error}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: ok in {result.seconds:.1f} s ({result.widget_outputs} widget outputs)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
