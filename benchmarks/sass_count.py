"""SASS instructions per element of fusionlab's kernels at the GPU size, compiled for sm_90 on any machine.

Triton compiles for a given target without a GPU; its bundled `nvdisasm` lists the machine code. For a kernel
without loops (pointwise, persistent reductions) every thread runs each instruction once, so instructions per
element = instructions / elements per thread, and the time the SMs need just to issue them is

    elements / 32 * instructions per element / (SMs * 4 schedulers * clock)

which bounds the kernel from below like the memory floor does. A kernel whose issue time is above its memory
floor cannot reach the copy roofline whatever its memory access pattern.

    python benchmarks/sass_count.py [workload ...]      # default: gelu_bias swiglu softmax rms_norm layer_norm
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

import torch
import triton
from triton.compiler import ASTSource

import fusionlab as fl
import fusionlab.runtime.compile_pool as compile_pool
from fusionlab.measure.workloads import get
from fusionlab.runtime.targets import stand_in_gpu

H200 = {"sms": 132, "schedulers": 4, "clock_hz": 1.98e9, "copy_bytes_per_s": 4.22e12}
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")


def sass(kernel: Any) -> list[str]:
    """The kernel's SASS opcodes that can run, one per instruction, in program order."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
        listing = subprocess.run([tool, "-c", cubin.name], capture_output=True, text=True, check=True).stdout
    opcodes = [match.group(1) for line in listing.splitlines() if (match := _INSTRUCTION.match(line))]
    last_exit = len(opcodes) - 1 - opcodes[::-1].index("EXIT")
    return opcodes[: last_exit + 1]  # after the last EXIT: a branch to itself and padding, never run


def count(name: str) -> list[dict[str, Any]]:
    fn, inputs = get(name).build("gpu", torch.device("cpu"), torch.bfloat16)
    exploration = fl.explore(fn, *inputs)
    compiled = exploration.compiled
    rows = []
    for handle, args, xnumel, rnumel in compiled.record_launches(*inputs):
        handle.function("cuda")
        job = compile_pool.job_for(handle, (handle, args, xnumel, rnumel))
        if job is None:
            continue
        kernel = triton.compile(ASTSource(job.function, job.signature, job.constants, job.attributes),
                                target=job.target, options=job.options)
        opcodes = sass(kernel)
        blocks = [v for k, v in sorted(job.constants.items()) if isinstance(v, int) and not isinstance(v, bool)]
        per_program = blocks[-2] * blocks[-1] if len(blocks) >= 2 else blocks[-1]
        threads = job.options["num_warps"] * 32
        per_thread = per_program / threads
        elements = xnumel * rnumel
        looped = "for roffset in" in handle.source  # its loop body runs more than once
        issue_s = elements / 32 * len(opcodes) / per_thread / (H200["sms"] * H200["schedulers"] * H200["clock_hz"])
        rows.append({"workload": name, "kernel": handle.name, "elements_per_thread": per_thread,
                     "instructions": len(opcodes), "per_element": len(opcodes) / per_thread,
                     "issue_ms": None if looped else issue_s * 1e3,
                     "top": collections.Counter(opcodes).most_common(6)})
    return rows


def main(names: list[str]) -> None:
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="fusionlab-sass-"))
    print("| workload | kernel | elements/thread | SASS instructions | per element | issue time on an H200 (ms) | "
          "most frequent |")
    print("|---|---|---|---|---|---|---|")
    with stand_in_gpu():
        for name in names:
            for row in count(name):
                issue = "looped: dynamic count differs" if row["issue_ms"] is None else f"{row['issue_ms']:.4f}"
                top = ", ".join(f"{op} {n}" for op, n in row["top"])
                print(f"| {row['workload']} | {row['kernel']} | {row['elements_per_thread']:g} | "
                      f"{row['instructions']} | {row['per_element']:.1f} | {issue} | {top} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["gelu_bias", "swiglu", "softmax", "rms_norm", "layer_norm", "residual_chain"])
