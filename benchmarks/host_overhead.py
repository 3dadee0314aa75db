"""Where a program's host time goes on CUDA: one call's Python time, with and without its kernel launches, against
Inductor's and eager's; and the GPU times (`do_bench`) of fusionlab and Inductor.

    python benchmarks/host_overhead.py OUT.json [workload]      # default: gpt_block
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
import triton

import fusionlab as fl
from fusionlab.measure.timing import idle_host_ms
from fusionlab.measure.workloads import get


def main(out: str, name: str) -> None:
    fn, inputs = get(name).build("gpu", torch.device("cuda"), torch.bfloat16)
    ex = fl.explore(fn, *inputs)
    flat = ex.flat_inputs(tuple(inputs), {})
    compiled = ex.compiled
    comp = torch.compile(fn)
    row: dict[str, Any] = {"workload": name, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}
    with torch.no_grad():
        expected = fn(*inputs)
        got = compiled(*flat)
        torch.testing.assert_close(got[0].float(), expected.float(), atol=6e-2, rtol=5e-2)
        comp(*inputs)
        row["fusionlab_host_ms"] = idle_host_ms(lambda: compiled(*flat), calls=200)
        row["inductor_host_ms"] = idle_host_ms(lambda: comp(*inputs), calls=200)
        row["eager_host_ms"] = idle_host_ms(lambda: fn(*inputs), calls=200)
        namespace = compiled.function.__globals__
        original = namespace["launch"]
        namespace["launch"] = lambda handle, *args, xnumel, rnumel=1: None
        row["fusionlab_without_launches_host_ms"] = idle_host_ms(lambda: compiled.function(*flat), calls=200)
        namespace["launch"] = original
        row["fusionlab_gpu_ms"] = triton.testing.do_bench(lambda: compiled.function(*flat), return_mode="median")
        row["inductor_gpu_ms"] = triton.testing.do_bench(lambda: comp(*inputs), return_mode="median")
    print(json.dumps(row, indent=1), flush=True)
    with open(out, "w") as handle:
        json.dump(row, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "gpt_block")
