"""Training steps of the zoo's models under DistributedDataParallel and FSDP2, compiled with backend="fusionlab",
beside the same steps in eager and compiled by Inductor.

    torchrun --standalone --nproc-per-node 2 benchmarks/distributed.py OUT_DIR [--models gpt2,llama]
             [--engines ddp,fsdp] [--steps 4] [--size tiny|gpu] [--no-inductor]

On CUDA: NCCL, one GPU per process, bf16 at the zoo's GPU size. On a CPU: gloo, the tiny size, float32, one thread per
process. Every runner starts from the same weights (seed 0) and sees the same batches (each rank its own). Checked
against eager's, the largest error over ranks relative to eager's largest magnitude: every step's loss and the first
backward's gradients (DDP: the all-reduced ones; FSDP2: each rank's shards) within the tolerance, float32 1e-4, bf16
twice Inductor's own error (at least 2e-2); the weights after the last AdamW step within twice Inductor's weight error
(at least the tolerance), when Inductor runs (Adam's update divides by the gradient's size, so tiny differences in
near-zero gradients grow in any compiler's weights), else reported only. Step time is the median wall time of the
steps after the first (which compiles), synchronised; one more step, profiled and not timed, counts the collectives.

Rank 0 writes OUT_DIR/distributed_<device>.csv and .md: per model, engine and runner the step time, the first step's
seconds, the errors against eager, the graphs the backend compiled (Dynamo's DDP optimizer splits a model at its
bucket boundaries; FSDP2's hooks break it per sharded layer) and the collectives of one profiled step with their time.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import fusionlab  # noqa: F401 - registers backend="fusionlab"
from fusionlab import dynamo_backend, models
from fusionlab.profile.cuda import collectives_us, kernels_of
from fusionlab.profile.profiler import quiet_profile

COLUMNS = ["model", "engine", "runner", "world", "device", "dtype", "size", "steps", "step_ms", "first_step_s",
           "loss_err", "grad_err", "weight_err", "tolerance", "weight_tolerance", "correct", "graphs", "graph_names",
           "collectives", "collective_ms", "gpu", "torch", "triton", "date"]


def _setup() -> tuple[int, int, torch.device]:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        return rank, world, torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(1)  # two processes on a small machine: one thread each, no oversubscription
    return rank, world, torch.device("cpu")


def _batches(name: str, size: str, model: torch.nn.Module, steps: int, rank: int, device: torch.device,
             dtype: torch.dtype) -> list[dict[str, torch.Tensor]]:
    """Each rank's own batches, the same for every runner."""
    entry = models.spec(name)
    _, batch, length = entry.sizes[size]
    batches = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(1000 + 100 * rank + step)
        inputs = entry.inputs(model.config, batch, length, True, generator)  # type: ignore[operator]
        batches.append({k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
                        for k, v in inputs.items()})
    return batches


def _layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The numbered layers FSDP2 shards one by one: the ModuleList holding the most parameters."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        return []
    biggest = max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))
    return list(biggest)


def _wrap(model: torch.nn.Module, engine: str, device: torch.device) -> torch.nn.Module:
    if engine == "ddp":
        if device.type == "cpu":
            # a tiny model (0.4 MiB) fits DDP's first bucket (1 MiB): small buckets, so that it has several and
            # Dynamo's DDP optimizer splits its graph at their boundaries as it does a real model's; the optimizer
            # takes its first bucket's size from this constant, DDP from bucket_cap_mb when it is given
            dist._DEFAULT_FIRST_BUCKET_BYTES = 64 * 1024  # type: ignore[attr-defined]
            return DistributedDataParallel(model, bucket_cap_mb=0.0625)
        return DistributedDataParallel(model, device_ids=[device.index])  # DDP's own buckets, as users run it
    if engine == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in _layers(model):
            fully_shard(layer)
        fully_shard(model)
        return model
    raise ValueError(f"engine must be ddp or fsdp, got {engine!r}")


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (FSDP2), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def _profiled(enabled: bool, device: torch.device) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with quiet_profile(activities) as profiler:  # Kineto's start and stop lines kept off stderr
        yield profiler


def _collectives(profiler: Any, device: torch.device) -> tuple[int, float]:
    """The collectives of a profiled step and their milliseconds: on CUDA the NCCL kernels (all-reduce, all-gather,
    reduce-scatter), on a CPU gloo's work spans ("gloo:all_gather", on its own threads; the c10d op that enqueues
    one returns before it runs, and FSDP's reduce-scatter runs as a gloo all-reduce)."""
    from torch.autograd import DeviceType

    if device.type == "cuda":
        found = collectives_us(kernels_of(profiler), calls=1)
        return round(sum(count for count, _ in found.values())), sum(us for _, us in found.values()) / 1e3
    spans = [e for e in profiler.events() if e.device_type == DeviceType.CPU and e.name.startswith("gloo:")]
    return len(spans), sum(e.time_range.elapsed_us() for e in spans) / 1e3


def _run(name: str, engine: str, runner: str, *, size: str, steps: int, device: torch.device,
         dtype: torch.dtype, rank: int) -> dict[str, Any]:
    torch._dynamo.reset()
    model, _ = models.build(name, size, device=device, dtype=dtype, train=True, seed=0)
    batches = _batches(name, size, model, steps + 1, rank, device, dtype)  # the last one profiled, not timed
    wrapped = _wrap(model, engine, device)
    call: Callable[..., Any] = wrapped
    if runner == "fusionlab":
        call = torch.compile(wrapped, backend="fusionlab")
    elif runner == "inductor":
        call = torch.compile(wrapped)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    before = dynamo_backend.mark()
    losses, seconds, grads = [], [], []
    collectives = (0, 0.0)
    for step, batch in enumerate(batches):
        profile_this = step == len(batches) - 1
        _sync(device)
        start = time.perf_counter()
        with _profiled(profile_this, device) as profiler:
            optimizer.zero_grad(set_to_none=True)
            loss = models.loss_of(call(**batch))
            loss.backward()
            if step == 0:
                grads = [_local(p.grad).detach().float().clone() for p in model.parameters() if p.grad is not None]
            optimizer.step()
            _sync(device)
        if not profile_this:
            seconds.append(time.perf_counter() - start)
        losses.append(loss.detach().float().clone())
        if profiler is not None:
            collectives = _collectives(profiler, device)
    weights = [_local(p).detach().float().clone() for p in model.parameters()]
    compiled = dynamo_backend.since(before) if runner == "fusionlab" else []
    return {"losses": losses, "grads": grads, "weights": weights, "seconds": seconds,
            "graphs": compiled, "collectives": collectives}


def _relative(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> float:
    """The largest error over the tensors, relative to each reference tensor's largest magnitude."""
    if len(ours) != len(theirs):
        return float("inf")
    worst = 0.0
    for a, b in zip(ours, theirs):
        scale = b.abs().max().item() or 1.0
        worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def _all_max(value: float, device: torch.device) -> float:
    """The largest of every rank's value (a check fails when it fails on any rank)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--engines", default="ddp,fsdp")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--size", choices=("tiny", "gpu"), default=None)
    parser.add_argument("--no-inductor", action="store_true", help="leave Inductor out (its CPU compile is slow)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step compiles, the others are timed")
    rank, world, device = _setup()
    size = args.size or ("gpu" if device.type == "cuda" else "tiny")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    runners = ["eager", "fusionlab"] + ([] if args.no_inductor else ["inductor"])
    import triton

    header = {"world": world, "device": device.type, "dtype": str(dtype).removeprefix("torch."), "size": size,
              "steps": args.steps, "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "",
              "torch": torch.__version__, "triton": triton.__version__,
              "date": datetime.date.today().isoformat()}
    rows = []
    for name in args.models.split(","):
        for engine in args.engines.split(","):
            results = {runner: _run(name, engine, runner, size=size, steps=args.steps, device=device, dtype=dtype,
                                    rank=rank) for runner in runners}
            eager = results["eager"]
            errors = {runner: (_all_max(_relative(r["losses"], eager["losses"]), device),
                               _all_max(_relative(r["grads"], eager["grads"]), device),
                               _all_max(_relative(r["weights"], eager["weights"]), device))
                      for runner, r in results.items()}
            floor = 1e-4 if dtype == torch.float32 else 2e-2
            reference = errors.get("inductor")
            tolerance = floor if reference is None or dtype == torch.float32 else max(floor, 2 * max(reference[:2]))
            weight_tolerance = max(tolerance, 2 * reference[2]) if reference is not None else None
            for runner, result in results.items():
                loss_err, grad_err, weight_err = errors[runner]
                graphs = result["graphs"]
                count, milliseconds = result["collectives"]
                rows.append({**header, "model": name, "engine": engine, "runner": runner,
                             # on a CPU fusionlab's kernels run in Triton's interpreter: that is no kernel time
                             "step_ms": "" if runner == "fusionlab" and device.type == "cpu" else
                             round(statistics.median(result["seconds"][1:]) * 1e3, 3),
                             "first_step_s": round(result["seconds"][0], 2),
                             "loss_err": f"{loss_err:.3g}", "grad_err": f"{grad_err:.3g}",
                             "weight_err": f"{weight_err:.3g}", "tolerance": f"{tolerance:.3g}",
                             "weight_tolerance": "" if weight_tolerance is None else f"{weight_tolerance:.3g}",
                             "correct": max(loss_err, grad_err) <= tolerance
                             and (weight_tolerance is None or weight_err <= weight_tolerance),
                             "graphs": len(graphs) if runner == "fusionlab" else "",
                             "graph_names": "; ".join(g.name for g in graphs),
                             "collectives": count, "collective_ms": round(milliseconds, 3)})
                if rank == 0:
                    print(f"{name} {engine} {runner}: step {rows[-1]['step_ms']} ms, first {rows[-1]['first_step_s']}"
                          f" s, loss err {rows[-1]['loss_err']}, grad err {rows[-1]['grad_err']}, weights "
                          f"{rows[-1]['weight_err']} (tolerance {rows[-1]['tolerance']}), graphs "
                          f"{rows[-1]['graphs']}, collectives {rows[-1]['collectives']}", flush=True)
    if rank == 0:
        _write(args.out, rows, device.type)
    dist.barrier()
    dist.destroy_process_group()
    if any(not row["correct"] for row in rows if row["runner"] == "fusionlab"):
        raise SystemExit("fusionlab's step differs from eager's beyond the tolerance: see the table")


def _write(out: Path, rows: list[dict[str, Any]], device: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"distributed_{device}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    first = rows[0]
    lines = [f"# Distributed training steps ({first['date']}; {first['world']} processes, {device}"
             f"{', ' + first['gpu'] if first['gpu'] else ''}; torch {first['torch']}, triton {first['triton']}; "
             f"{first['size']} size, {first['dtype']}, {first['steps']} steps)", "",
             "| model | engine | runner | step ms | first step s | loss err | grad err | weight err | tolerance | "
             "weight tolerance | correct | graphs | collectives (ms) |", "|" + "---|" * 13]
    for row in rows:
        collectives = f"{row['collectives']} ({row['collective_ms']})" if row["collectives"] != "" else ""
        lines.append(f"| {row['model']} | {row['engine']} | {row['runner']} | {row['step_ms']} | "
                     f"{row['first_step_s']} | {row['loss_err']} | {row['grad_err']} | {row['weight_err']} | "
                     f"{row['tolerance']} | {row['weight_tolerance']} | {row['correct']} | {row['graphs']} | "
                     f"{collectives} |")
    lines += ["", "loss err: every step's loss; grad err: the first backward's gradients (each rank's, "
              "DDP all-reduced, FSDP2 sharded); weight err: after the last AdamW step, checked against twice "
              "Inductor's (Adam's update divides by the gradient's size, so tiny differences in near-zero gradients "
              "grow). Errors are relative to eager's largest magnitude, the largest over ranks. graphs: those "
              "fusionlab compiled (forward and backward of each Dynamo graph); collectives: in one more step, "
              "profiled and not timed, with their time (on a CPU gloo's wall time, the wait for the slower rank "
              "included)."]
    if device == "cpu":
        lines.append("On a CPU fusionlab's kernels run in Triton's interpreter: its step time is not measured.")
    (out / f"distributed_{device}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
