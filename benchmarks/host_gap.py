"""Why a model call's host time differs between the model benchmark and a pipelined loop: one process, the model
compiled by fusionlab and by Inductor as `fusionlab bench --models` does (one model object, both compiled), then per
compiler the call timed four ways (do_bench's median as the benchmark takes it, the host time of one call started on an
idle GPU, the wall time per call of 50 calls in a row, and the same with Python's garbage collector off), how many
launches took Triton's JIT path instead of the direct launcher, and where the host time goes (Python's profiler, then
torch.profiler's CPU-side ops).

    python benchmarks/host_gap.py [MODEL ...]      # default: gpt2
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import sys
import time

import torch
from triton.testing import do_bench

from fusionlab import models
from fusionlab.measure.timing import idle_host_ms
from fusionlab.runtime import direct


def pipelined_ms(step, calls: int = 50) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def idle_profile(step, calls: int = 10) -> str:
    profiler = cProfile.Profile()
    for _ in range(calls):
        torch.cuda.synchronize()
        profiler.enable()
        step()
        profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    return "\n".join(line for line in text.getvalue().splitlines() if line.strip())


def op_profile(step, calls: int = 5) -> str:
    """torch.profiler's CPU-side view of calls from an idle GPU: what the time outside Python functions goes to."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(calls):
            torch.cuda.synchronize()
            step()
        torch.cuda.synchronize()
    return profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=48)


def main(names: list[str]) -> None:
    jit_calls = [0]
    original = direct.DirectLaunch.__call__

    def counted(self, args):
        checks = self.checks
        key = direct.specialization_key(args if checks is None else [args[i] for i in checks]) if checks != () else ()
        if key not in self.launchers or direct.hooks_active():
            jit_calls[0] += 1
        return original(self, args)

    direct.DirectLaunch.__call__ = counted
    for name in names:
        model, inputs = models.build(name, "gpu", device="cuda", dtype=torch.bfloat16)
        torch._dynamo.reset()
        ours = torch.compile(model, backend="fusionlab")
        inductor = torch.compile(model)

        def step_of(run, inputs=inputs):
            def call():
                with torch.no_grad():
                    return run(**inputs)
            return call

        steps = {"eager": step_of(model), "fusionlab": step_of(ours), "inductor": step_of(inductor)}
        for step in steps.values():
            for _ in range(3):
                step()
        torch.cuda.synchronize()
        for label, step in steps.items():
            jit_calls[0] = 0
            bench = float(do_bench(step, return_mode="median"))
            idle = idle_host_ms(step)
            pipe = pipelined_ms(step)
            gc.disable()
            idle_nogc = idle_host_ms(step)
            pipe_nogc = pipelined_ms(step)
            gc.enable()
            print(f"{name} {label}: do_bench {bench:.2f} ms, idle host {idle:.2f} (gc off {idle_nogc:.2f}), "
                  f"pipelined {pipe:.2f} (gc off {pipe_nogc:.2f}); JIT-path launches {jit_calls[0]}; "
                  f"gc objects {len(gc.get_objects())}", flush=True)
        for label in ("fusionlab", "inductor"):
            print(f"--- {name} {label}: profile of 10 calls, each from an idle GPU")
            print(idle_profile(steps[label]), flush=True)
            print(op_profile(steps[label]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["gpt2"])
