"""Where the host's time goes in one call of a zoo model through the fusionlab backend: Python's profiler over
repeated calls (after warm-up), the functions with the most time of their own, and the same for Inductor.

    python benchmarks/host_profile.py [MODEL] [CALLS] [inference|training] [cudagraphs]   # default: vit 20 inference

With `cudagraphs`, fusionlab runs with options={"cudagraphs": True} and Inductor with mode="reduce-overhead"; a
training call is the zoo's step (gradients dropped, loss, backward).

Profiling inflates Python's own time (each call is counted), not the CUDA driver's: read the shares, not the
absolute times. GPU-side work is not waited for inside the profile (one synchronise after it).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch

from fusionlab import models
from fusionlab.measure.models import model_step


def profile(label: str, step: object, calls: int) -> None:
    for _ in range(3):
        step()  # type: ignore[operator]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()  # type: ignore[operator]
    torch.cuda.synchronize()
    plain = (time.perf_counter() - start) / calls * 1e3
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()  # type: ignore[operator]
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(22)
    stats.sort_stats("cumulative").print_stats("fusionlab|cudagraph_trees|runtime_wrappers", 18)
    print(f"===== {label}: {plain:.2f} ms a call unprofiled (wall, synchronised after {calls} calls)")
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    print("\n".join(lines[:80]), flush=True)


def main(name: str, calls: int, train: bool, graphs: bool) -> None:
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=train)
    mode = f"{'training' if train else 'inference'}{', CUDA graphs' if graphs else ''}"
    ours = torch.compile(model, backend="fusionlab", options={"cudagraphs": graphs})
    profile(f"{name} {mode} fusionlab", model_step(model, ours, inputs, train), calls)
    torch._dynamo.reset()
    inductor = torch.compile(model, mode="reduce-overhead" if graphs else None)
    profile(f"{name} {mode} inductor", model_step(model, inductor, inputs, train), calls)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "vit", int(sys.argv[2]) if len(sys.argv) > 2 else 20,
         len(sys.argv) > 3 and sys.argv[3] == "training", len(sys.argv) > 4 and sys.argv[4] == "cudagraphs")
