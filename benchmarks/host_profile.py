"""Where the host's time goes in one call of a zoo model through the fusionlab backend: Python's profiler over
repeated inference calls (after warm-up), the functions with the most time of their own, and the same for Inductor.

    python benchmarks/host_profile.py [MODEL] [CALLS]      # default: vit 20

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
    print(f"===== {label}: {plain:.2f} ms a call unprofiled (wall, synchronised after {calls} calls)")
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    print("\n".join(lines[:40]), flush=True)


def main(name: str, calls: int) -> None:
    model, inputs = models.build(name, "gpu", device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ours = torch.compile(model, backend="fusionlab")
        profile(f"{name} fusionlab", lambda: ours(**inputs), calls)
        torch._dynamo.reset()
        inductor = torch.compile(model)
        profile(f"{name} inductor", lambda: inductor(**inputs), calls)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "vit", int(sys.argv[2]) if len(sys.argv) > 2 else 20)
