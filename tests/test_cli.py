"""`fusionlab bench` on a small CPU run: the CSV has the promised columns, fusionlab's time says "modelled"."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fusionlab.cli import main

REQUIRED_COLUMNS = (
    "workload", "dtype", "shape", "bound", "eager_ms", "fusionlab_ms", "inductor_ms", "eager_kernels",
    "fusionlab_kernels", "inductor_kernels", "fusionlab_pct_roofline", "inductor_pct_roofline",
    "fusionlab_compile_s", "inductor_compile_s", "gpu", "torch", "triton", "date", "fusionlab_timing",
)  # fmt: skip


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    folder = tmp_path_factory.mktemp("bench")
    status = main(["bench", "softmax", "--device", "cpu", "--size", "cpu", "--out", str(folder), "--repeat", "3",
                   "--quiet"])
    return status, folder


def test_bench_writes_csv_with_the_columns(bench_run: tuple[int, Path]) -> None:
    status, folder = bench_run
    assert status == 0
    with (folder / "bench_cpu.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1
    row = rows[0]
    assert set(REQUIRED_COLUMNS) <= set(row)
    assert row["workload"] == "softmax" and row["dtype"] == "float32" and row["shape"] == "64x256"
    assert row["bound"] == "memory" and row["fusionlab_timing"] == "modelled" and row["gpu"] == "none (cpu)"
    assert float(row["eager_ms"]) > 0 and float(row["fusionlab_ms"]) > 0 and float(row["inductor_ms"]) > 0
    assert int(row["fusionlab_kernels"]) == 1 and float(row["inductor_compile_s"]) > 0
    assert row["error"] == ""


def test_bench_writes_markdown(bench_run: tuple[int, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, folder = bench_run
    text = (folder / "bench_cpu.md").read_text()
    assert text.startswith("| workload | dtype | shape | bound | eager_ms")
    assert "| softmax | float32 | 64x256 | memory |" in text and "modelled" in text


def test_unknown_workload_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "softmaks", "--device", "cpu"]) == 2
    assert "unknown workload softmaks" in capsys.readouterr().err


def test_list_through_python_dash_m() -> None:
    result = subprocess.run([sys.executable, "-m", "fusionlab", "bench", "--list"], capture_output=True, text=True,
                            check=True)
    assert "gpt_block" in result.stdout and "compute" in result.stdout


def test_report_subcommand_has_its_slot() -> None:
    with pytest.raises(SystemExit):
        main(["report"])  # MODULE:FUNCTION is required


def test_bench_writes_each_kernel_beside_the_summary(bench_run: tuple[int, Path]) -> None:
    """Where each program's time goes: fusionlab's kernel modelled (CPU), Inductor's listed, untimed."""
    _, folder = bench_run
    with (folder / "bench_cpu_kernels.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["workload"] for row in rows} == {"softmax"}
    ours = [row for row in rows if row["variant"] == "fusionlab"]
    assert len(ours) == 1 and ours[0]["kernel"].startswith("reduction_") and ours[0]["timing"] == "modelled"
    assert float(ours[0]["median_ms"]) > 0 and int(ours[0]["bytes"]) > 0
    assert any(row["variant"] == "inductor" and row["timing"] == "untimed" for row in rows)
