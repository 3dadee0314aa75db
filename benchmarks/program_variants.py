"""One workload's program built with and without a code-generator change, timed in interleaved rounds on the GPU,
with each variant's per-kernel GPU times (torch.profiler), so a regression can be pinned to one kernel.

Variants: `current`; `libdevice_erf` (tl.erf instead of the preamble's `_erf`); `short_rows_8_warps` (persistent
reductions over rows of at most 1024 with 8 warps, as before the one-warp rule); `transposed_copy` (a product's
transposed operand copied in its transposed order). Every variant is checked against eager before it is timed.

    python benchmarks/program_variants.py OUT.json [workload]        # default: gpt_block
"""

from __future__ import annotations

import collections
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import triton
import triton.testing

import fusionlab as fl
import fusionlab.decompose.primitives as primitives
import fusionlab.decompose.rules.copies as copies
import fusionlab.runtime.config as config
from fusionlab.measure.timing import is_device_kernel
from fusionlab.measure.workloads import get

VARIANTS = ("current", "libdevice_erf", "short_rows_8_warps", "transposed_copy")


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    saved = (dict(primitives.FLOAT32_OVERRIDES), config._cuda, copies._feeds_products_only)
    if name == "libdevice_erf":
        primitives.FLOAT32_OVERRIDES.clear()
    if name == "short_rows_8_warps":
        def eight(shape: Any) -> Any:
            chosen = saved[1](shape)
            if shape.persistent and shape.kind == "reduction" and chosen.RBLOCK <= 1024:
                return config.BlockConfig(chosen.XBLOCK, chosen.RBLOCK, 8 if chosen.XBLOCK * chosen.RBLOCK >= 2048
                                          else chosen.num_warps)
            return chosen
        config._cuda = eight  # type: ignore[assignment]
    if name == "transposed_copy":
        copies._feeds_products_only = lambda node: False  # type: ignore[assignment]
    try:
        yield
    finally:
        primitives.FLOAT32_OVERRIDES.clear()
        primitives.FLOAT32_OVERRIDES.update(saved[0])
        config._cuda, copies._feeds_products_only = saved[1], saved[2]  # type: ignore[assignment]


def kernel_times(run: Any, calls: int = 20) -> dict[str, float]:
    """GPU ms per call of each kernel name."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if is_device_kernel(event):
            totals[event.name[:90]] += event.device_time / 1e3 / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main(out: str, name: str) -> None:
    fn, inputs = get(name).build("gpu", torch.device("cuda"), torch.bfloat16)
    runs: dict[str, Any] = {}
    with torch.no_grad():
        expected = fn(*inputs)
        for label in VARIANTS:
            with variant(label):  # launch configs are chosen at the first call: run it inside
                ex = fl.explore(fn, *inputs)
                got = ex(*inputs)
            torch.testing.assert_close(got.float(), expected.float(), atol=6e-2, rtol=5e-2)
            flat = ex.flat_inputs(tuple(inputs), {})
            runs[label] = (lambda compiled=ex.compiled, flat=flat: compiled.function(*flat))
        inductor = torch.compile(fn)
        inductor(*inputs)
        runs["inductor"] = lambda: inductor(*inputs)
        times: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(5):
            for label, run in runs.items():
                times[label].append(float(triton.testing.do_bench(run, warmup=10, rep=50, return_mode="median")))
        row: dict[str, Any] = {"workload": name, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
                               "gpu_ms": {label: statistics.median(t) for label, t in times.items()},
                               "rounds_ms": times,
                               "kernels_ms": {label: kernel_times(run) for label, run in runs.items()}}
    print(json.dumps({k: row[k] for k in ("workload", "gpu_ms")}, indent=1), flush=True)
    for label, kernels in row["kernels_ms"].items():
        print(label, f"{sum(kernels.values()):.4f} ms in kernels")
        for kernel, ms in kernels.items():
            print(f"   {ms:8.4f}  {kernel}")
    with open(out, "w") as handle:
        json.dump(row, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "gpt_block")
