"""Where a zoo model's GPU time goes through the backend: one step (inference or a training step, GPU size, bf16),
per `conv_layout`, profiled by torch.profiler; the kernels summed by name, the costliest first, with the total.

    python benchmarks/kernel_breakdown.py [MODEL] [inference|training] [LAYOUT ...]   # default: resnet50 training auto

A LAYOUT of `inductor` profiles torch.compile's default mode (TorchInductor) the same way, for the comparison; a
LAYOUT ending in `+graphs` runs with CUDA graphs (`auto+graphs`: `options={"cudagraphs": True}`; `inductor+graphs`:
`mode="reduce-overhead"`), the kernels of a replay profiled the same way. The kernels are also summed by kind
(generated, convolution, matrix product, ATen); with KERNELS_CSV=DIR every kernel is written to
DIR/kernels-MODEL-MODE-LAYOUT.csv.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from fusionlab import models
from fusionlab.measure.models import _step_marked, model_step


def breakdown(name: str, train: bool, layout: str, top: int = 30) -> None:
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=train)
    torch._dynamo.reset()
    base, graphs = layout.removesuffix("+graphs"), layout.endswith("+graphs")
    if base == "inductor":
        compiled = torch.compile(model, mode="reduce-overhead" if graphs else None)
    else:
        compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": base, "cudagraphs": graphs})
    if base == "inductor" and graphs:
        compiled = _step_marked(compiled)
    step = model_step(model, compiled, inputs, train)
    start = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    which = "Inductor" if base == "inductor" else f"conv_layout={base!r}"
    which += ", CUDA graphs" if graphs else ""
    print(f"\n## {name} {'training' if train else 'inference'}, {which} "
          f"(compile and 3 steps {time.perf_counter() - start:.0f} s)")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = totals[event.name[:90]]
            entry[0] += 1
            entry[1] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
    whole = sum(t for _, t in totals.values())
    print(f"GPU time {whole / 1e3:.2f} ms in {sum(int(c) for c, _ in totals.values())} kernels")
    print("| ms | share | calls | kernel |\n|---|---|---|---|")
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])
    for kernel, (count, total) in ranked[:top]:
        print(f"| {total / 1e3:.3f} | {100 * total / whole:.1f}% | {int(count)} | `{kernel}` |")
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for kernel, (count, total) in ranked:
        kinds[_kind(kernel)][0] += count
        kinds[_kind(kernel)][1] += total
    print("\n| kind | ms | kernels |\n|---|---|---|")
    for kind, (count, total) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"| {kind} | {total / 1e3:.3f} | {int(count)} |")
    if base != "inductor":
        _describe([kernel for kernel, _ in ranked if _kind(kernel) == "generated (Triton)"][:8])
    folder = os.environ.get("KERNELS_CSV")
    if folder:  # every kernel, for a closer look than the table's
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"kernels-{name}-{'training' if train else 'inference'}-{layout}.csv"),
                  "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["kernel", "kind", "calls", "us"])
            writer.writerows([kernel, _kind(kernel), int(count), round(total, 2)] for kernel, (count, total) in ranked)


def _describe(kernels: list[str]) -> None:
    """What each of the costliest generated kernels computes: its graph, the values it stores with their types, and
    the module and line they come from (a kernel name can recur in several graphs)."""
    from fusionlab import dynamo_backend

    print("\n| kernel | graph | what it stores | from |\n|---|---|---|---|")
    for backend_graph in dynamo_backend.graphs:
        ex = backend_graph.exploration
        graph = ex.decomposed.graph
        for group in ex.fused.groups:
            if group.is_kernel and group.name in kernels:
                stored = [graph[n].type.text() for n in group.outputs]
                where = next((graph[n].where for n in group.nodes if graph[n].where), "")
                print(f"| `{group.name}` | {backend_graph.name} | {', '.join(stored)} | {where} |")


def _kind(kernel: str) -> str:
    """A kernel's kind by its name: generated (fusionlab's or Inductor's Triton), convolution, matrix product,
    ATen's elementwise copies, or other ATen kernels."""
    if kernel.startswith(("triton_", "pointwise_", "reduction_", "matmul_", "persistent_")):
        return "generated (Triton)"
    if any(word in kernel for word in ("conv", "xmma", "cudnn", "implicit_gemm")):
        return "convolution"
    if any(word in kernel for word in ("nvjet", "gemm", "cublas", "splitKreduce")):
        return "matrix product"
    if "elementwise_kernel" in kernel:
        return "ATen elementwise"
    return "other ATen"


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
    train = (sys.argv[2] if len(sys.argv) > 2 else "training") == "training"
    for layout in sys.argv[3:] or ["auto"]:
        breakdown(name, train, layout)


if __name__ == "__main__":
    main()
