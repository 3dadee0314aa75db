"""Whether a model's graphs are replayed from CUDA graphs through the backend: one zoo model (GPU size, bf16) compiled
with `options={"cudagraphs": True}`, stepped a few times, then per compiled graph its role, captures and replays, and
where one step's host time goes (Python's profiler, the 25 costliest functions by own time). With `inductor` last,
the same steps and profile for Inductor's `mode="reduce-overhead"` follow. "host" is the time a step takes to
return with the GPU idle before it (its issue time, median of the steps after the third); "step" waits for the GPU.
Then, from torch.profiler, one step's GPU busy and idle time and its longest idle gaps, with the host ops during them.

    python benchmarks/cudagraph_captures.py [MODEL] [inference|training] [STEPS] [inductor|-] [LAYOUT]
    # default: resnet50 training 6, no Inductor, conv_layout "auto"
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

from fusionlab import dynamo_backend, models
from fusionlab.measure.models import model_step


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
    train = (sys.argv[2] if len(sys.argv) > 2 else "training") == "training"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=train)
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    layout = sys.argv[5] if len(sys.argv) > 5 else "auto"
    print(f"{name} {'training' if train else 'inference'}, conv_layout={layout!r}")
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": True, "conv_layout": layout})
    step = model_step(model, compiled, inputs, train)
    _steps(step, steps)
    for graph in dynamo_backend.since(before):
        graphed = [ex.__dict__.get("graphed") for ex in graph.explorations.values()]
        print(f"graph {graph.index} {graph.role}: {len(graph.explorations)} sizes, "
              f"{[repr(g) for g in graphed]}, ended by {graph.ended_by or 'return'}")
        for g in graphed:  # saved activations handed out uncopied, and how many are still held after the step
            if g is not None and g.kept_from is not None:
                print(f"  saved activations from output {g.kept_from}: {len(g._handed)} storages handed, "
                      f"{sum(s.held() for s in g._handed)} still held")
    _profile(step)
    _gaps(step)
    if sys.argv[4:5] == ["inductor"]:
        torch._dynamo.reset()
        print("\nInductor, mode='reduce-overhead':")
        inductor = torch.compile(model, mode="reduce-overhead")
        _profiled(model_step(model, inductor, inputs, train), steps)


def _steps(step: object, steps: int) -> None:
    """Run `steps` steps, printing each one's issue time (host) and its time until the GPU is done (step)."""
    hosts = []
    for index in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()  # type: ignore[operator]
        issued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        hosts.append(1e3 * (issued - start))
        print(f"step {index}: {1e3 * (done - start):.2f} ms, host {hosts[-1]:.2f} ms")
    if len(hosts) > 3:
        print(f"host ms, median of steps 3 on: {statistics.median(hosts[3:]):.2f}")


def _profiled(step: object, steps: int) -> None:
    _steps(step, steps)
    _profile(step)
    _gaps(step)


def _gaps(step: object, top: int = 12) -> None:
    """Where the GPU waits within one step (torch.profiler's kernel intervals): its busy time, the idle time between
    its first kernel's start and its last's end, and the longest gaps with the kernels on each side and the host ops
    that began during them."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()  # type: ignore[operator]
        torch.cuda.synchronize()
    events = prof.events()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name) for e in events
                      if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[0])
    host = sorted((e.time_range.start, e.name) for e in events if e.device_type == torch.autograd.DeviceType.CPU)
    if not kernels:
        print("no kernels profiled")
        return
    busy, gaps, reach = 0.0, [], kernels[0][0]
    for start, end, name in kernels:
        if start > reach:
            gaps.append((start - reach, reach, start, name))
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    span = reach - kernels[0][0]
    print(f"\nGPU within one step: {span / 1e3:.2f} ms from first kernel to last, busy {busy / 1e3:.2f} ms, "
          f"idle {(span - busy) / 1e3:.2f} ms in {len(gaps)} gaps; longest:")
    for length, since, until, after in sorted(gaps, reverse=True)[:top]:
        during = list(dict.fromkeys(name for at, name in host if since <= at < until))[:6]
        print(f"  {length:8.1f} us before `{after[:60]}`; host began: {during}")


def _profile(step: object) -> None:
    """Python's profile of one step, the 25 functions with the most time of their own."""
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    step()  # type: ignore[operator]
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats("fusionlab|cudagraph_trees|runtime_wrappers", 15)
    print(text.getvalue()[:9000])


if __name__ == "__main__":
    main()
