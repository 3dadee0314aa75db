"""The benchmark report on CPU: its structure, modelled rows labelled, reference bytes; the GPU run measured."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab.measure import workloads
from fusionlab.measure.bench import BenchReport, BenchRow, benchmark, recorded_results
from fusionlab.measure.devices import PROFILES, model_time
from fusionlab.measure.workloads import tensor_bytes


@pytest.fixture(scope="module")
def streamed() -> tuple[BenchReport, list[BenchRow], Any]:
    fn, inputs = workloads.get("gelu_bias").build("cpu", "cpu")
    exploration = fl.explore(fn, *inputs)
    rows: list[BenchRow] = []
    report = benchmark(exploration, progress=False, repeat=3, callback=rows.append)
    return report, rows, exploration


def test_rows_stream_to_the_callback_in_order(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, rows, _ = streamed
    assert tuple(rows) == report.rows


def test_one_program_row_per_variant(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, _, _ = streamed
    programs = {(r.variant, r.timing) for r in report.program_rows()}
    assert {("reference", "modelled"), ("eager", "measured"), ("fusionlab", "modelled"),
            ("inductor", "measured"), ("inductor", "modelled"), ("unfused", "modelled")} == programs
    assert report.workload == "gelu_bias" and report.bound == "memory" and report.device == "cpu"


def test_fusionlab_is_modelled_never_timed_on_cpu(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, _, exploration = streamed
    fusionlab_rows = [r for r in report.rows if r.variant == "fusionlab"]
    assert len(fusionlab_rows) >= 2  # the program and its kernel(s)
    assert all(r.timing == "modelled" and r.device == "H200" for r in fusionlab_rows)
    program = report.row("fusionlab")
    groups = [g for g in exploration.fused.groups if g.kind in ("pointwise", "reduction", "extern")]
    moved = sum(g.bytes_read + g.bytes_written for g in groups)
    assert program.bytes == moved and program.launches == len(groups)
    assert program.median_ms == pytest.approx(model_time(moved, len(groups), 0, PROFILES["H200"]) * 1e3)
    assert program.pct_of_copy_bw == pytest.approx(
        moved / (program.median_ms / 1e3) / PROFILES["H200"].memory_bandwidth_bytes_per_s * 100
    )


def test_reference_row_holds_the_minimal_bytes(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, _, exploration = streamed
    x, b = exploration.example_inputs
    minimal = tensor_bytes((x, b)) + x.numel() * x.element_size()  # read x and b, write gelu(x + b)
    reference = report.row("reference")
    assert reference.bytes == report.minimal_bytes == minimal
    assert reference.pct_of_copy_bw == pytest.approx(100)


def test_measured_rows_on_cpu(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, _, _ = streamed
    eager, inductor = report.row("eager"), report.row("inductor")
    assert eager.timing == inductor.timing == "measured" and eager.device == "cpu"
    assert eager.median_ms > 0 and inductor.median_ms > 0
    assert eager.launches == 2 and inductor.launches == 1
    kernels = [r for r in report.rows if r.variant == "inductor" and r.kernel]
    assert kernels and all(r.timing == "untimed" and r.median_ms is None for r in kernels)
    assert report.fusionlab_compile_s is not None and report.inductor_compile_s is not None
    assert report.inductor_compile_s > 0


def test_table_and_views(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    report, _, _ = streamed
    table = report.table
    assert list(table.columns[:8]) == ["variant", "kernel", "median_ms", "launches", "bytes", "achieved_gbps",
                                       "pct_of_copy_bw", "timing"]
    assert len(table) == len(report.rows)
    assert set(table[table.variant == "fusionlab"].timing) == {"modelled"}
    assert "modelled (H200)" in report.as_text()
    assert "gelu_bias" in repr(report) and "modelled" in repr(report)
    assert "<table>" in report._repr_html_()
    with pytest.raises(KeyError, match="no row"):
        report.row("missing")


def test_wrong_results_stop_the_benchmark_before_timing() -> None:
    class Broken:
        fn = staticmethod(torch.relu)
        example_inputs = (torch.randn(8, 8),)
        example_kwargs: dict[str, Any] = {}

        def flat_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
            return list(args)

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + 1

    with pytest.raises(AssertionError, match="fusionlab's program for relu output 0 differs"):
        benchmark(Broken(), progress=False)


def test_device_must_be_where_the_inputs_are(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    _, _, exploration = streamed
    with pytest.raises(ValueError, match="explore with inputs on cuda"):
        benchmark(exploration, device="cuda", progress=False)


def test_recorded_results_are_read_and_filtered(tmp_path: Any) -> None:
    assert isinstance(recorded_results(), tuple)
    path = tmp_path / "bench.csv"
    path.write_text("workload,eager_ms,gpu\nsoftmax,1.0,NVIDIA H200\nswiglu,2.0,NVIDIA H200\n")
    rows = recorded_results("swiglu", path=path)
    assert rows == ({"workload": "swiglu", "eager_ms": "2.0", "gpu": "NVIDIA H200"},)
    assert recorded_results(path=tmp_path / "missing.csv") == ()


@pytest.mark.gpu
def test_cuda_benchmark_is_measured_per_kernel() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    fn, inputs = workloads.get("add_layer_norm").build("cpu", "cuda", torch.float32)
    report = benchmark(fl.explore(fn, *inputs), progress=False)
    for variant in ("eager", "fusionlab", "inductor"):
        row = report.row(variant, timing="measured")
        assert row.median_ms > 0 and row.launches and row.pct_of_roofline
    measured_kernels = [r for r in report.rows if r.variant == "fusionlab" and r.kernel and r.timing == "measured"]
    assert measured_kernels and all(r.bytes and r.achieved_gbps for r in measured_kernels)
    assert report.row("fusionlab", timing="modelled").device == "H200"
    assert len(report.speedups()) == 5 and all(s > 0 for s in report.speedups())  # five rounds by default
    assert report.row("fusionlab", timing="measured").median_ms in report.round_ms["fusionlab"]


def test_programs_take_turns_in_rounds_whose_order_rotates(monkeypatch: pytest.MonkeyPatch) -> None:
    import fusionlab.measure.bench as bench

    order: list[str] = []
    monkeypatch.setattr(bench, "_time", lambda run, device, repeat: run())
    runs = {name: (lambda name=name: order.append(name) or float(len(order))) for name in ("a", "b", "c")}
    times = bench._interleaved(runs, torch.device("cpu"), repeat=1, rounds=4)
    assert order == list("abc" "bca" "cab" "abc")
    assert times == {"a": (1.0, 6.0, 8.0, 10.0), "b": (2.0, 4.0, 9.0, 11.0), "c": (3.0, 5.0, 7.0, 12.0)}


def test_rounds_are_kept_and_speedups_come_from_one_round_each(
    streamed: tuple[BenchReport, list[BenchRow], Any],
) -> None:
    report, _, _ = streamed
    assert set(report.round_ms) == {"eager", "inductor"} and len(report.round_ms["eager"]) == 5  # as on CUDA
    eager = report.row("eager")
    assert eager.median_ms == sorted(report.round_ms["eager"])[2] and report.threads == eager.threads == 1
    assert (eager.low_ms, eager.high_ms) == (min(report.round_ms["eager"]), max(report.round_ms["eager"]))
    assert report.speedups() == ()  # fusionlab is modelled on a CPU: no measured ratio
    timed = dataclasses.replace(report, round_ms={"fusionlab": (1.0, 2.0, 4.0), "inductor": (1.1, 1.0, 4.4)})
    assert timed.speedups() == pytest.approx((1.1, 0.5, 1.1))


def test_rounds_must_be_positive(streamed: tuple[BenchReport, list[BenchRow], Any]) -> None:
    _, _, exploration = streamed
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        benchmark(exploration, progress=False, rounds=0)


def _model_row(**values: Any) -> dict[str, Any]:
    from fusionlab.measure.models import MODEL_COLUMNS

    row: dict[str, Any] = {column: None for column in MODEL_COLUMNS}
    row.update(model="bert", mode="inference", batch=16, dtype="bfloat16", correct=True, fusionlab_err=0.01,
               inductor_err=0.02, fusionlab_kernels=40, fusionlab_externs=86, error="", **values)
    return row


def test_model_table_shows_host_and_gpu_ms_of_each_and_the_cuda_graph_rows() -> None:
    from fusionlab.measure.models import MODEL_COLUMNS, model_table

    for variant in ("eager", "fusionlab", "inductor"):
        assert {f"{variant}_host_ms", f"{variant}_gpu_ms", f"{variant}_launches", f"{variant}_ms"} <= set(MODEL_COLUMNS)
    plain = _model_row(cudagraphs=False, eager_host_ms=4.5, fusionlab_host_ms=10.9, inductor_host_ms=1.25,
                       eager_gpu_ms=5.5, fusionlab_gpu_ms=3.75, inductor_gpu_ms=2.5, eager_launches=207,
                       fusionlab_launches=126, inductor_launches=129)
    graphed = _model_row(cudagraphs=True, fusionlab_host_ms=0.5, inductor_host_ms=0.25)
    failed = {**_model_row(cudagraphs=True), "fusionlab_err": None, "error": "CudaGraphsError: capture failed"}
    lines = model_table([plain, graphed, failed]).splitlines()
    header, body = lines[0], lines[2:]
    assert "host ms (e / f / I)" in header and "GPU ms (e / f / I)" in header and "CUDA graphs" in header
    assert all(line.count("|") == header.count("|") for line in body)
    assert "| 4.5 / 10.9 / 1.25 | 5.5 / 3.75 / 2.5 | 207 / 126 / 129 |" in body[0] and "| no |" in body[0]
    assert "| fusionlab / reduce-overhead |" in body[1] and "| – / 0.5 / 0.25 |" in body[1]
    assert "failed: CudaGraphsError: capture failed" in body[2]


def test_bench_models_adds_cuda_graph_rows_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionlab.measure import models as model_bench

    calls: list[tuple[str, str, bool, Any]] = []

    def fake(name: str, *, mode: str, cudagraphs: bool, **options: Any) -> dict[str, Any]:
        calls.append((name, mode, cudagraphs, options.get("device")))
        return _model_row(model=name, mode=mode, cudagraphs=cudagraphs)

    monkeypatch.setattr(model_bench, "bench_model", fake)
    model_bench.bench_models(["bert"], modes=("inference",), device="cpu")
    assert calls == [("bert", "inference", False, "cpu")]
    calls.clear()
    rows = model_bench.bench_models(["bert"], modes=("inference", "training"), device="cuda")
    assert [(c[1], c[2]) for c in calls] == [("inference", False), ("inference", True), ("training", False),
                                             ("training", True)]
    assert [r["cudagraphs"] for r in rows] == [False, True, False, True]


def test_bench_model_refuses_cuda_graphs_on_a_cpu() -> None:
    from fusionlab.measure.models import bench_model

    with pytest.raises(ValueError, match="compares CUDA graphs, which need a CUDA device: device is cpu"):
        bench_model("bert", device="cpu", cudagraphs=True)
