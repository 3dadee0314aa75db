"""One workload's program built with and without a code-generator change, timed in interleaved rounds on the GPU,
with each variant's per-kernel GPU times (torch.profiler), so a regression can be pinned to one kernel.

Variants: `current`; `addmm` (an extern addmm keeps its bias unless its users have the product's own shape, as
before the reshape rule); `libdevice_erf` (tl.erf instead of the preamble's `_erf`). Every variant is checked
against eager before it is timed.

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
import fusionlab.matmul_rules as matmul_rules
import fusionlab.primitives as primitives
from fusionlab.workloads import get


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    saved_site, saved_overrides = matmul_rules._bias_site, dict(primitives.FLOAT32_OVERRIDES)
    if name == "addmm":
        def direct_only(b: Any, bias: Any) -> Any:
            site = saved_site(b, bias)
            return site if site == tuple(b.expected.shape) else None
        matmul_rules._bias_site = direct_only  # type: ignore[assignment]
    if name == "libdevice_erf":
        primitives.FLOAT32_OVERRIDES.clear()
    try:
        yield
    finally:
        matmul_rules._bias_site = saved_site  # type: ignore[assignment]
        primitives.FLOAT32_OVERRIDES.clear()
        primitives.FLOAT32_OVERRIDES.update(saved_overrides)


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
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:90]] += event.device_time / 1e3 / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main(out: str, name: str) -> None:
    fn, inputs = get(name).build("gpu", torch.device("cuda"), torch.bfloat16)
    runs: dict[str, Any] = {}
    with torch.no_grad():
        expected = fn(*inputs)
        for label in ("current", "addmm", "libdevice_erf"):
            with variant(label):
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
