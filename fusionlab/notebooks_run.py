"""Execute notebooks headless, top to bottom, and fail on the first cell error.

The kernel runs with `TRITON_INTERPRET=1` in its environment (so Triton's interpreter is the default on a
machine without a GPU) and its working folder is the notebook's. Used by `scripts/lab.sh --headless` and the
tests.

    $ python -m fusionlab.notebooks_run notebooks/00_tour.ipynb
    $ python -m fusionlab.notebooks_run notebooks/*.ipynb --save executed/
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NotebookRun", "WIDGET_MIME", "main", "run_notebook"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


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
    """This process's environment plus TRITON_INTERPRET=1 (and `extra`)."""
    environment = dict(os.environ)
    environment["TRITON_INTERPRET"] = "1"
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusionlab.notebooks_run",
                                     description="Execute notebooks headless (TRITON_INTERPRET=1); fail on any error.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: 600)")
    parser.add_argument("--save", default=None, help="folder to write the executed notebooks to")
    arguments = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

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
