"""Which kernel's compile is slow, or never ends: one step of a zoo model through the backend (GPU size, bf16), with
every kernel compile the compile pool's workers run logged to OUT/compiles.log ("start NAME", "end NAME SECONDS")
and each kernel's Triton source, signature, constants and options written to OUT/NAME.json before it compiles. Run it
under `timeout`: the kernels started and never ended are the ones to read.

    timeout -s INT 150 python benchmarks/compile_watch.py OUT [MODEL] [inference|training] [LAYOUT]   # bert training

LAYOUT is the backend's `conv_layout` (default "auto"). Where the time goes outside the compiles, run it under
`timeout -s ABRT N python -X faulthandler ...`: every thread's stack is printed when the time is up. After the first
step, three more are timed (a hang inside a kernel shows there).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fusionlab import models
from fusionlab.measure.models import model_step
from fusionlab.runtime import compile_pool


def main() -> None:
    out = Path(sys.argv[1])
    name = sys.argv[2] if len(sys.argv) > 2 else "bert"
    train = (sys.argv[3] if len(sys.argv) > 3 else "training") == "training"
    layout = sys.argv[4] if len(sys.argv) > 4 else "auto"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "compiles.log"
    original = compile_pool.compile_job

    def watched(job: compile_pool.CompileJob) -> str:  # runs in the forked workers, which inherit this module
        record: dict[str, Any] = {"name": job.name, "source": job.function.src, "signature": job.signature,
                                  "constants": {repr(k): repr(v) for k, v in job.constants.items()},
                                  "attributes": {repr(k): repr(v) for k, v in job.attributes.items()},
                                  "options": {k: repr(v) for k, v in job.options.items()}, "target": repr(job.target)}
        (out / f"{job.name}.json").write_text(json.dumps(record, indent=1))
        with log.open("a") as f:
            f.write(f"start {job.name} pid {os.getpid()}\n")
        start = time.perf_counter()
        result = original(job)
        with log.open("a") as f:
            f.write(f"end {job.name} {time.perf_counter() - start:.2f}\n")
        return result

    compile_pool.compile_job = watched  # type: ignore[assignment]
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=train)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": layout})
    step = model_step(model, compiled, inputs, train)
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    mode = "training" if train else "inference"
    print(f"{name} {mode}, conv_layout={layout!r}: first step {time.perf_counter() - start:.1f} s", flush=True)
    for _ in range(3):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        print(f"  next step {1e3 * (time.perf_counter() - start):.2f} ms", flush=True)


if __name__ == "__main__":
    main()
