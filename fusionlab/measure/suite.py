"""The workload suite: benchmark every named workload and summarise each as one row (CSV and Markdown).

    >>> rows = run_suite(["softmax"], device="cpu", size="cpu", progress=False)   # doctest: +SKIP
    >>> write_results(rows, "results")                                              # doctest: +SKIP
"""

from __future__ import annotations

import csv
import datetime
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fusionlab.explore import explore
from fusionlab.measure.bench import BenchReport, benchmark
from fusionlab.measure.devices import DeviceProfile
from fusionlab.measure.report import format_cell
from fusionlab.measure.workloads import Size, Workload, default_dtype, get, names

__all__ = ["KERNEL_COLUMNS", "SUITE_COLUMNS", "kernel_rows", "markdown_table", "results_stem", "run_suite",
           "summary_row", "write_kernel_results", "write_results", "write_table"]

SUITE_COLUMNS: tuple[str, ...] = (
    "workload", "dtype", "shape", "bound",
    "eager_ms", "fusionlab_ms", "inductor_ms",
    "inductor_over_fusionlab", "inductor_over_fusionlab_min", "inductor_over_fusionlab_max", "rounds",
    "eager_kernels", "fusionlab_kernels", "inductor_kernels",
    "fusionlab_pct_roofline", "inductor_pct_roofline", "eager_pct_roofline",
    "fusionlab_compile_s", "inductor_compile_s",
    "fusionlab_timing", "minimal_mb", "gflop",
    "fusionlab_modelled_ms", "inductor_modelled_ms", "unfused_modelled_ms", "profile",
    "gpu", "torch", "triton", "date", "error",
)  # fmt: skip

# One row per kernel of each variant (fusionlab's, Inductor's, "(other kernels)" for cuBLAS and copies): where a
# program's time goes, beside the summary.
KERNEL_COLUMNS: tuple[str, ...] = (
    "workload", "variant", "kernel", "median_ms", "launches", "bytes", "achieved_gbps", "pct_of_copy_bw", "timing",
    "device",
)

_MARKDOWN_COLUMNS: tuple[str, ...] = (
    "workload", "dtype", "shape", "bound", "eager_ms", "fusionlab_ms", "inductor_ms", "inductor_over_fusionlab",
    "eager_kernels", "fusionlab_kernels", "inductor_kernels", "fusionlab_pct_roofline", "inductor_pct_roofline",
    "fusionlab_compile_s", "inductor_compile_s", "fusionlab_timing",
)  # fmt: skip


def run_suite(
    workload_names: Sequence[str] | None = None,
    *,
    device: str = "cpu",
    size: Size | None = None,
    dtype: torch.dtype | None = None,
    repeat: int = 20,
    profile: str | DeviceProfile = "H200",
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    rounds: int | None = None,
    on_report: Callable[[BenchReport], None] | None = None,
) -> tuple[dict[str, Any], ...]:
    """Benchmark the named workloads (all by default) and return one summary row each; `rounds` as in
    `fusionlab.measure.bench.benchmark` (default: 5 on CUDA, 1 on a CPU). `on_report` gets each workload's whole
    `BenchReport` (its per-kernel rows: `kernel_rows`).

    A workload that fails leaves a row with its `error` filled in, and the suite goes on.
    """
    chosen = [get(name) for name in (workload_names or names())]
    where = torch.device(device)
    size = size or ("gpu" if where.type == "cuda" else "cpu")
    rows = []
    for workload in chosen:
        row, report = _run_one(workload, where, size, dtype or default_dtype(size), repeat, profile, progress, rounds)
        rows.append(row)
        if report is not None and on_report is not None:
            on_report(report)
        if on_row is not None:
            on_row(row)
        torch._dynamo.reset()
        if where.type == "cuda":
            torch.cuda.empty_cache()  # the last workload's tensors went with _run_one's frame
    return tuple(rows)


def _run_one(
    workload: Workload,
    device: torch.device,
    size: Size,
    dtype: torch.dtype,
    repeat: int,
    profile: str | DeviceProfile,
    progress: bool,
    rounds: int | None,
) -> tuple[dict[str, Any], BenchReport | None]:
    inputs: tuple[Any, ...] = ()
    try:
        fn, inputs = workload.build(size, device, dtype)
        report = benchmark(
            explore(fn, *inputs), profile=profile, progress=progress, repeat=repeat, workload=workload.name,
            rounds=rounds, draw_inputs=lambda: workload.fresh_inputs(size, device, dtype),
        )
        return summary_row(report, workload, inputs, dtype), report
    except Exception as error:  # one broken workload must not hide the others' results
        message = " ".join(str(error).split())  # one line: it goes into a CSV cell and a Markdown table
        return _base_row(workload, inputs, dtype, device) | {"error": f"{type(error).__name__}: {message}"}, None


def summary_row(report: BenchReport, workload: Workload, inputs: tuple[Any, ...], dtype: torch.dtype) -> dict[str, Any]:
    """One suite row from a report: measured times where the device allows, modelled otherwise."""
    row = _base_row(workload, inputs, dtype, torch.device(report.device))
    eager = report.row("eager", timing="measured")
    fusionlab = report.row("fusionlab")  # measured on CUDA, modelled elsewhere
    inductor = report.row("inductor", timing="measured")
    modelled = {r.variant: r for r in report.program_rows() if r.timing == "modelled" and r.variant != "reference"}
    row.update(
        eager_ms=eager.median_ms,
        fusionlab_ms=fusionlab.median_ms,
        inductor_ms=inductor.median_ms,
        eager_kernels=eager.launches,
        fusionlab_kernels=fusionlab.launches,
        inductor_kernels=inductor.launches,
        fusionlab_pct_roofline=fusionlab.pct_of_roofline,
        inductor_pct_roofline=inductor.pct_of_roofline,
        eager_pct_roofline=eager.pct_of_roofline,
        fusionlab_compile_s=report.fusionlab_compile_s,
        inductor_compile_s=report.inductor_compile_s,
        fusionlab_timing=fusionlab.timing,
        minimal_mb=report.minimal_bytes / 1e6,
        gflop=report.flops / 1e9,
        fusionlab_modelled_ms=_milliseconds(modelled.get("fusionlab")),
        inductor_modelled_ms=_milliseconds(modelled.get("inductor")),
        unfused_modelled_ms=_milliseconds(modelled.get("unfused")),
        profile=report.profile.name,
        rounds=len(report.round_ms.get("inductor", ())) or None,
    )
    speedups = report.speedups("fusionlab", over="inductor")
    if speedups:  # per round, both timed in the same round: the verdict that run-to-run drift does not move
        row.update(
            inductor_over_fusionlab=statistics.median(speedups),
            inductor_over_fusionlab_min=min(speedups),
            inductor_over_fusionlab_max=max(speedups),
        )
    return row


def _milliseconds(row: Any) -> float | None:
    return None if row is None else row.median_ms


def _base_row(workload: Workload, inputs: tuple[Any, ...], dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    import triton

    first = next((value for value in inputs if isinstance(value, torch.Tensor)), None)
    row: dict[str, Any] = {column: None for column in SUITE_COLUMNS}
    row.update(
        workload=workload.name,
        dtype=str(dtype).removeprefix("torch."),
        shape="x".join(str(d) for d in first.shape) if first is not None else "",
        bound=workload.bound,
        gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "none (cpu)",
        torch=torch.__version__,
        triton=triton.__version__,
        date=datetime.date.today().isoformat(),
        error="",
    )
    return row


def results_stem(rows: Sequence[dict[str, Any]], prefix: str = "bench") -> str:
    """`bench_h200` for rows measured on an NVIDIA H200 (the first row naming a GPU decides); `bench_cpu` on a CPU.
    `prefix="bench_models"` names the model rows' files."""
    gpu = next((str(row["gpu"]) for row in rows if row.get("gpu")), "none (cpu)")
    if gpu.startswith("none"):
        return f"{prefix}_cpu"
    words = [word for word in re.split(r"[^A-Za-z0-9]+", gpu.lower()) if word and word != "nvidia"]
    return f"{prefix}_" + "_".join(words[:2])


def write_table(rows: Sequence[dict[str, Any]], folder: str | Path, stem: str, columns: Sequence[str],
                markdown: Callable[[Sequence[dict[str, Any]]], str]) -> tuple[Path, Path]:
    """Write `<stem>.csv` (the `columns` of each row) and `<stem>.md` (`markdown(rows)`) into `folder`."""
    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)
    csv_path, markdown_path = directory / f"{stem}.csv", directory / f"{stem}.md"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({column: format_cell(row.get(column)) for column in columns})
    markdown_path.write_text(markdown(rows) + "\n", encoding="utf-8")
    return csv_path, markdown_path


def write_results(rows: Sequence[dict[str, Any]], folder: str | Path) -> tuple[Path, Path]:
    """Write `<stem>.csv` and `<stem>.md` into `folder`; returns both paths."""
    return write_table(rows, folder, results_stem(rows), SUITE_COLUMNS, markdown_table)


def kernel_rows(report: BenchReport) -> list[dict[str, Any]]:
    """The report's per-kernel rows (measured on CUDA; modelled or untimed on a CPU), as KERNEL_COLUMNS dicts."""
    return [{"workload": report.workload} | {c: getattr(r, c) for c in KERNEL_COLUMNS[1:]}
            for r in report.rows if r.kernel]


def write_kernel_results(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Per-kernel rows of a suite run as CSV (`<stem>_kernels.csv` beside the summary)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(KERNEL_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({column: format_cell(row.get(column)) for column in KERNEL_COLUMNS})
    return target


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub Markdown table of the main columns, with the machine and versions under it."""
    header = "| " + " | ".join(_MARKDOWN_COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in _MARKDOWN_COLUMNS) + "|"
    lines = [header, rule]
    for row in rows:
        cells = [format_cell(row.get(column)) for column in _MARKDOWN_COLUMNS]
        if row.get("error"):
            cells[4] = " ".join(f"failed: {row['error']}".split())[:160].replace("|", "/")
        lines.append("| " + " | ".join(cells) + " |")
    if rows:
        first = rows[0]
        lines.append("")
        lines.append(
            f"{first['gpu']}; torch {first['torch']}, triton {first['triton']}; {first['date']}. "
            f"Times in ms (medians); pct_roofline: minimal bytes (memory-bound) or FLOPs (compute-bound) over time, "
            f"against the measured copy bandwidth or the {first.get('profile') or 'H200'} bf16 peak; "
            "fusionlab_timing says whether fusionlab was measured or modelled; compile_s: cold, caches off."
        )
    return "\n".join(lines)
