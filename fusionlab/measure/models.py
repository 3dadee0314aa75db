"""Whole models: each zoo model (fusionlab.models) through eager, `torch.compile(backend="fusionlab")` and Inductor,
inference and a training step, correctness first, then times, kernels and compile seconds.

    >>> rows = bench_models(["gpt2"], size="tiny", device="cpu")
    >>> rows[0]["fusionlab_err"] <= rows[0]["tolerance"]
    True

On CUDA every time is a median of CUDA-event timings (`triton.testing.do_bench`), the three taken in turns over
several rounds. Beside it, per call: host ms (the wall time until the call returns, started on an idle GPU and not
synchronised: the CPU's time to issue the work) and GPU ms (the sum of the kernels' times, torch.profiler), and
launches. With `cudagraphs=True` a row compares fusionlab's CUDA graphs (`options={"cudagraphs": True}`: an output
held past a call is copied) with Inductor's `mode="reduce-overhead"` (eager stays eager). On a CPU fusionlab's kernels
run under Triton's interpreter, which is not kernel time: its time is left empty and labelled so; eager and Inductor
are measured at a fixed thread count, and host and GPU ms are left empty.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import statistics
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

MODEL_COLUMNS = (
    "model", "mode", "cudagraphs", "size", "batch", "dtype", "device", "gpu", "torch", "triton", "date",
    "fusionlab_err", "inductor_err", "tolerance", "correct",
    "eager_ms", "fusionlab_ms", "inductor_ms", "speedup_vs_inductor", "timing",
    "eager_host_ms", "fusionlab_host_ms", "inductor_host_ms", "eager_gpu_ms", "fusionlab_gpu_ms", "inductor_gpu_ms",
    "fusionlab_graphs", "fusionlab_kernels", "fusionlab_externs", "eager_launches", "fusionlab_launches",
    "inductor_launches", "fusionlab_compile_s", "inductor_compile_s", "threads", "rounds", "error",
)

Step = Callable[[], Any]


def _errors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    """The largest error over the tensors, each relative to the largest value of its kind (a gradient that is zero
    in exact arithmetic is compared against its neighbours' scale, not its own rounding noise)."""
    scale = max((e.float().abs().max().item() for e in expected.values()), default=0.0)
    worst = 0.0
    for key, want in expected.items():
        got = actual[key].float()
        error = (got - want.float()).abs().max().item()
        worst = max(worst, error / max(want.float().abs().max().item(), 1e-3 * scale, 1e-30))
    return worst


def _results(model: torch.nn.Module, run: Callable[..., Any], inputs: dict[str, torch.Tensor],
             train: bool) -> dict[str, torch.Tensor]:
    """The tensors to compare: logits (inference); the loss and every parameter's gradient (training)."""
    from fusionlab import models

    if not train:
        with torch.no_grad():
            out = run(**inputs)
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = out[0] if isinstance(out, (tuple, list)) else out
        return {"logits": logits.detach()}
    loss, grads = models.train_step(run, dict(model.named_parameters()), inputs)
    return {"loss": loss.reshape(1), **grads}


def model_step(model: torch.nn.Module, run: Callable[..., Any], inputs: dict[str, torch.Tensor], train: bool) -> Step:
    """One step of `run` (the model, or a compiled form of it) on `inputs`: inference under no_grad, or a training
    step (the parameters' gradients dropped, the zoo's loss, backward)."""
    parameters = list(model.parameters())
    if not train:
        def infer() -> Any:
            with torch.no_grad():
                return run(**inputs)
        return infer

    from fusionlab.models import loss_of

    def step() -> Any:
        for parameter in parameters:
            parameter.grad = None
        loss = loss_of(run(**inputs))
        loss.backward()
        return loss
    return step


def _timed(step: Step, device: torch.device) -> float:
    """Seconds of one call (the first: compiles)."""
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _median_ms(step: Step, device: torch.device, repeat: int) -> float:
    if device.type == "cuda":
        from fusionlab.measure.timing import median_cuda_ms
        return median_cuda_ms(step)
    from fusionlab.measure.timing import median_wall_ms
    return median_wall_ms(step, repeat=repeat, warmup=1)


def _kernels(step: Step, device: torch.device) -> tuple[float | None, int | None]:
    """GPU milliseconds (the kernels' times summed) and launches of one call, by torch.profiler."""
    if device.type != "cuda":
        return None, None
    from fusionlab.measure.timing import cuda_kernel_ms
    per_kernel, launches = cuda_kernel_ms(step, iterations=3)
    return sum(per_kernel.values()), launches


def _host_ms(step: Step, device: torch.device, repeat: int) -> float | None:
    """Median milliseconds until a call returns, started on an idle GPU and not waited for: the host's issue time."""
    if device.type != "cuda":
        return None
    from fusionlab.measure.timing import idle_host_ms

    with torch.cuda.device(device):
        return idle_host_ms(step, calls=max(repeat, 5))


def _step_marked(run: Callable[..., Any]) -> Callable[..., Any]:
    """Inductor's reduce-overhead run, each call a new step of its CUDA graph trees (its outputs of the step before
    may be overwritten: the benchmark reads each before the next call)."""
    def marked(*args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return run(*args, **kwargs)
    return marked


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[int]:
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def bench_model(name: str, *, mode: str = "inference", size: str | None = None, device: str | None = None,
                dtype: torch.dtype | None = None, rounds: int | None = None, repeat: int = 5,
                threads: int | None = 1, cudagraphs: bool = False) -> dict[str, Any]:
    """One zoo model in one mode ("inference" or "training"): a row of MODEL_COLUMNS. `cudagraphs=True`: fusionlab
    with CUDA graphs against Inductor's reduce-overhead (CUDA only)."""
    import triton

    from fusionlab import dynamo_backend, models
    from fusionlab.measure.timing import tolerance

    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    size = size or ("gpu" if where.type == "cuda" else "tiny")
    dtype = dtype or (torch.bfloat16 if where.type == "cuda" else torch.float32)
    rounds = rounds or (3 if where.type == "cuda" else 1)
    train = mode == "training"
    if mode not in ("inference", "training"):
        raise ValueError(f"mode must be 'inference' or 'training', got {mode!r}")
    if cudagraphs and where.type != "cuda":
        raise ValueError(f"cudagraphs=True compares CUDA graphs, which need a CUDA device: device is {where}")
    row: dict[str, Any] = {column: None for column in MODEL_COLUMNS}
    row.update(model=name, mode=mode, cudagraphs=cudagraphs, size=size, dtype=str(dtype).removeprefix("torch."),
               device=where.type,
               gpu=torch.cuda.get_device_name(where) if where.type == "cuda" else "none (cpu)",
               torch=torch.__version__, triton=triton.__version__, date=datetime.date.today().isoformat(),
               rounds=rounds, error="")
    with _threads(threads if where.type == "cpu" else None) as used:
        row["threads"] = used if where.type == "cpu" else None
        model, inputs = models.build(name, size, device=where, dtype=dtype, train=train)
        row["batch"] = next(iter(inputs.values())).shape[0]
        torch._dynamo.reset()
        before = dynamo_backend.mark()
        if cudagraphs:
            ours = torch.compile(model, backend="fusionlab", options={"cudagraphs": True})
            inductor = _step_marked(torch.compile(model, mode="reduce-overhead"))
        else:
            ours = torch.compile(model, backend="fusionlab")
            inductor = torch.compile(model)
        eager_step, our_step, inductor_step = (model_step(model, run, inputs, train) for run in (model, ours, inductor))
        row["fusionlab_compile_s"] = _timed(our_step, where)
        row["inductor_compile_s"] = _timed(inductor_step, where)

        # correctness first: both compiled models against eager, on the same weights and inputs
        expected = _results(model, model, inputs, train)
        row["fusionlab_err"] = _errors(_results(model, ours, inputs, train), expected)
        row["inductor_err"] = _errors(_results(model, inductor, inputs, train), expected)
        floor = tolerance(dtype)[0] if dtype != torch.float32 else 1e-5
        row["tolerance"] = max(floor, 2 * row["inductor_err"])
        row["correct"] = row["fusionlab_err"] <= row["tolerance"]

        compiled = dynamo_backend.since(before)
        row["fusionlab_graphs"] = len(compiled)
        row["fusionlab_kernels"] = sum(len(g.exploration.fused.kernels) for g in compiled)
        row["fusionlab_externs"] = sum(sum(1 for grp in g.exploration.fused.groups if grp.kind == "extern")
                                       for g in compiled)
        if not row["correct"]:
            row["error"] = (f"fusionlab differs from eager by {row['fusionlab_err']:.3g} (Inductor: "
                            f"{row['inductor_err']:.3g}): not timed")
            return row

        steps = {"eager": eager_step, "inductor": inductor_step}
        if where.type == "cuda":
            steps["fusionlab"] = our_step
        times: dict[str, list[float]] = {key: [] for key in steps}
        for _ in range(rounds):  # in turns, so that a slow moment of the machine is shared
            for key, step in steps.items():
                times[key].append(_median_ms(step, where, repeat))
        for key, values in times.items():
            row[f"{key}_ms"] = statistics.median(values)
            row[f"{key}_gpu_ms"], row[f"{key}_launches"] = _kernels(steps[key], where)
            row[f"{key}_host_ms"] = _host_ms(steps[key], where, repeat)
        row["timing"] = ("cuda events (median)" if where.type == "cuda" else
                         f"cpu wall (median, {used} threads); fusionlab runs under Triton's interpreter: not timed")
        if row["fusionlab_ms"] and row["inductor_ms"]:
            row["speedup_vs_inductor"] = row["inductor_ms"] / row["fusionlab_ms"]
    return row


def bench_models(names: Sequence[str] | None = None, *, modes: Sequence[str] = ("inference", "training"),
                 on_row: Callable[[dict[str, Any]], None] | None = None, cudagraphs: Sequence[bool] | None = None,
                 **options: Any) -> list[dict[str, Any]]:
    """Every zoo model (or `names`) in every mode, without and then with CUDA graphs (`cudagraphs`: default both on
    CUDA, without on a CPU); a failure is a row with its error, not a stopped run."""
    from fusionlab import models

    if cudagraphs is None:
        on_cuda = torch.device(options.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")).type == "cuda"
        cudagraphs = (False, True) if on_cuda else (False,)
    rows = []
    for name in names or models.names():
        for mode in modes:
            for graphed in cudagraphs:
                try:
                    row = bench_model(name, mode=mode, cudagraphs=graphed, **options)
                except Exception as error:  # noqa: BLE001 - recorded in the row, the run goes on
                    frames = traceback.extract_tb(error.__traceback__)[-3:]
                    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames))
                    row = {column: None for column in MODEL_COLUMNS}
                    row.update(model=name, mode=mode, cudagraphs=graphed,
                               error=f"{type(error).__name__}: {str(error)[:300]} (at {where})")
                rows.append(row)
                _release()
                if on_row is not None:
                    on_row(row)
    return rows


def _release() -> None:
    """Let the last model's compiled graphs, their buffers and CUDA graphs go before the next model: kept, a run over
    the zoo's training steps filled an H200's 140 GB by the fourth model."""
    from fusionlab import dynamo_backend

    torch._dynamo.reset()
    dynamo_backend.forget()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def write_model_results(rows: Sequence[dict[str, Any]], folder: str | Path) -> tuple[Path, Path]:
    """Write `bench_models_<gpu>.csv` and `.md` into `folder`; returns both paths."""
    from fusionlab.measure.suite import results_stem, write_table

    return write_table(rows, folder, results_stem(rows, prefix="bench_models"), MODEL_COLUMNS, model_table)


def model_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table: model, mode, correctness, times, kernels, compile seconds."""
    def cell(value: Any, digits: str = ".3g") -> str:
        if value is None or value == "":
            return "–"
        return format(value, digits) if isinstance(value, float) else str(value)

    def three(key: str, digits: str = ".3g") -> str:
        return " / ".join(cell(r.get(f"{variant}_{key}"), digits) for variant in ("eager", "fusionlab", "inductor"))

    lines = ["| model | mode | batch | dtype | CUDA graphs | err vs eager (Inductor's) | eager ms | fusionlab ms | "
             "Inductor ms | vs Inductor | host ms (e / f / I) | GPU ms (e / f / I) | launches (e / f / I) | "
             "kernels / externs | compile s (Inductor's) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        graphs = "fusionlab / reduce-overhead" if r.get("cudagraphs") else "no"
        if r.get("error") and r.get("fusionlab_err") is None:
            lines.append(f"| {r['model']} | {r['mode']} | | | {graphs} | failed: {r['error']} |" + " |" * 9)
            continue
        lines.append(
            f"| {r['model']} | {r['mode']} | {cell(r['batch'])} | {r['dtype']} | {graphs} | "
            f"{cell(r['fusionlab_err'])} ({cell(r['inductor_err'])}){'' if r['correct'] else ' **differs**'} | "
            f"{cell(r['eager_ms'])} | {cell(r['fusionlab_ms'])} | {cell(r['inductor_ms'])} | "
            f"{cell(r['speedup_vs_inductor'], '.2f')} | {three('host_ms')} | {three('gpu_ms')} | "
            f"{three('launches')} | {r['fusionlab_kernels']} / {r['fusionlab_externs']} | "
            f"{cell(r['fusionlab_compile_s'])} ({cell(r['inductor_compile_s'])}) |")
    return "\n".join(lines)
