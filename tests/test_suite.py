"""Suite rows: the file names, Markdown and CSV they become (no benchmark run: synthetic rows)."""

from __future__ import annotations

import csv
from pathlib import Path

from fusionlab.measure.suite import SUITE_COLUMNS, markdown_table, results_stem, write_results


def row(**values: object) -> dict[str, object]:
    base: dict[str, object] = {column: None for column in SUITE_COLUMNS}
    base.update(workload="softmax", dtype="bfloat16", shape="8192x8192", bound="memory", eager_ms=0.1,
                fusionlab_ms=0.08, inductor_ms=0.07, gpu="NVIDIA H200", torch="2.11.0", triton="3.6.0",
                date="2026-11-30", error="", fusionlab_timing="measured")
    base.update(values)
    return base


def test_results_are_named_after_the_gpu() -> None:
    assert results_stem([row()]) == "bench_h200"
    assert results_stem([row(gpu="none (cpu)")]) == "bench_cpu"
    assert results_stem([row(gpu="NVIDIA H100 80GB HBM3")]) == "bench_h100_80gb"


def test_markdown_has_a_header_a_line_per_row_and_the_machine() -> None:
    text = markdown_table([row(), row(workload="gpt_block", error="CaptureError: boom | bang")])
    lines = text.splitlines()
    assert lines[0].startswith("| workload |") and lines[1].startswith("|---")
    assert "| softmax | bfloat16 | 8192x8192 | memory | 0.1 | 0.08 | 0.07 |" in text
    assert "failed: CaptureError: boom / bang" in text
    assert "NVIDIA H200; torch 2.11.0, triton 3.6.0; 2026-11-30" in text


def test_write_results_keeps_every_column(tmp_path: Path) -> None:
    csv_path, markdown_path = write_results([row()], tmp_path / "out")
    assert csv_path.name == "bench_h200.csv" and markdown_path.exists()
    with csv_path.open() as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == SUITE_COLUMNS
        assert next(reader)["fusionlab_ms"] == "0.08"
