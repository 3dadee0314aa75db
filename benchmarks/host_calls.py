"""Why a zoo model's plain step (no CUDA graphs) is host-bound through the backend, beside Inductor's: one step
profiled by torch.profiler with the host's activity, then per compiler (fusionlab, Inductor)
- the CUDA runtime and driver calls of a step (count and host µs): launches, allocations, and anything that waits
  for the GPU (a synchronisation, a copy to the host) and so stops the host from running ahead of it;
- the GPU's busy and idle time in the step and its longest idle gaps, with the host ops that began in them;
- the aten ops with the most host time of their own;
- the steps' issue time (returning with an idle GPU before) and their time back to back.

    python benchmarks/host_calls.py [MODEL] [inference|training]   # default: llama training
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from fusionlab import models
from fusionlab.measure.models import model_step

_WAITS = ("Synchronize", "Memcpy", "cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "EventQuery", "StreamQuery")


def report(label: str, step: object) -> None:
    for _ in range(3):
        step()  # type: ignore[operator]
    torch.cuda.synchronize()
    issue = []
    for _ in range(8):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()  # type: ignore[operator]
        issue.append(1e3 * (time.perf_counter() - start))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        step()  # type: ignore[operator]
    torch.cuda.synchronize()
    back_to_back = 1e3 * (time.perf_counter() - start) / 10
    print(f"\n## {label}: issue {statistics.median(issue):.2f} ms a step (idle GPU before), "
          f"back to back {back_to_back:.2f} ms")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()  # type: ignore[operator]
        step()  # type: ignore[operator]
        torch.cuda.synchronize()
    events = prof.events()
    calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CPU:
            continue
        if event.name.startswith(("cuda", "cu")):
            calls[event.name][0] += 0.5
            calls[event.name][1] += event.self_cpu_time_total / 2
        elif event.name.startswith("aten::"):
            ops[event.name][0] += 0.5
            ops[event.name][1] += event.self_cpu_time_total / 2
    print("\n| runtime call | per step | host µs | waits for the GPU? |\n|---|---|---|---|")
    for name, (count, total) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
        wait = "**yes**" if any(w in name for w in _WAITS) else ""
        print(f"| `{name}` | {count:g} | {total:.0f} | {wait} |")
    print("\n| aten op | per step | host µs (own) |\n|---|---|---|")
    for name, (count, total) in sorted(ops.items(), key=lambda kv: -kv[1][1])[:18]:
        print(f"| `{name}` | {count:g} | {total:.0f} |")
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    waits = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                   if e.device_type == torch.autograd.DeviceType.CPU and any(w in e.name for w in _WAITS))
    if kernels:
        busy, gaps, reach = 0.0, [], kernels[0][0]
        for start, end, name in kernels:
            if start > reach:
                gaps.append((start - reach, reach, name))
            busy += max(0.0, end - max(start, reach))
            reach = max(reach, end)
        span = reach - kernels[0][0]
        print(f"\ntwo steps on the GPU: span {span / 1e3:.2f} ms, busy {busy / 1e3:.2f} ms, idle "
              f"{(span - busy) / 1e3:.2f} ms; the longest idle gaps:")
        for length, at, after in sorted(gaps, reverse=True)[:8]:
            during = [n for s, e, n in waits if s < at + length and e > at]
            print(f"- {length / 1e3:.3f} ms before `{after[:70]}`" + (f"; host waits: {during[:3]}" if during else ""))


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "llama"
    train = (sys.argv[2] if len(sys.argv) > 2 else "training") == "training"
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=train)
    mode = "training" if train else "inference"
    torch._dynamo.reset()
    report(f"{name} {mode}, fusionlab", model_step(model, torch.compile(model, backend="fusionlab"), inputs, train))
    torch._dynamo.reset()
    report(f"{name} {mode}, Inductor", model_step(model, torch.compile(model), inputs, train))


if __name__ == "__main__":
    main()
