"""Run the course's code cells in one IPython shell per notebook, without a Jupyter kernel (for a machine that has
IPython but not jupyter_client and zmq, such as the GPU machine): each cell must run; its text output is kept.

    python benchmarks/notebooks_ipython.py OUT_DIR notebooks/*.ipynb

Prints one line per notebook (seconds, cells, the first failing cell) and writes OUT_DIR/<name>.txt; exits 1 when a
cell failed. `python -m fusionlab.notebooks_run` is the full check (a real kernel, widgets, stderr).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell


def run(path: Path, out: Path) -> bool:
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    shell = InteractiveShell()
    log = io.StringIO()
    start, failed = time.perf_counter(), None
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        log.write(f"\n# ---- cell {index}\n{source}\n# ----\n")
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            result = shell.run_cell(source, store_history=True)
        if not result.success:
            failed = index
            log.write(f"\n# FAILED: {result.error_in_exec or result.error_before_exec!r}\n")
            break
    (out / f"{path.stem}.txt").write_text(log.getvalue(), encoding="utf-8")
    state = "ok" if failed is None else f"FAILED at code cell {failed}"
    print(f"{path.stem}: {time.perf_counter() - start:.0f} s, {len(cells)} cells, {state}", flush=True)
    InteractiveShell.clear_instance()
    return failed is None


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = [run(Path(name), out) for name in sys.argv[2:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
