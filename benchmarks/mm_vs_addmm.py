"""cuBLAS mm against addmm (the bias in cuBLAS's epilogue) on the linear_gelu and gpt-style shapes, bf16, one run.

The extern path of fusionlab calls addmm and then its own gelu kernel; Inductor calls mm and adds the bias in its
gelu kernel. If mm + a bias read in the pointwise kernel is cheaper than addmm, the bias belongs in the epilogue.

    python benchmarks/mm_vs_addmm.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import triton
import triton.testing

SHAPES = {"linear_gelu": (8192, 4096, 16384), "gpt_mlp_up": (4096, 2048, 8192), "square_4096": (4096, 4096, 4096)}


def main(out: str) -> None:
    rows = []
    for name, (m, k, n) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        gelu = torch.nn.functional.gelu
        torch.testing.assert_close(torch.addmm(b, x, w), torch.mm(x, w) + b, atol=6e-2, rtol=2e-2)
        runs = {"mm": lambda: torch.mm(x, w), "addmm": lambda: torch.addmm(b, x, w),
                "mm_then_bias_gelu": lambda: gelu(torch.mm(x, w) + b),
                "addmm_then_gelu": lambda: gelu(torch.addmm(b, x, w))}
        times: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(5):  # rounds: each takes its turn
            for key, run in runs.items():
                times[key].append(triton.testing.do_bench(run, return_mode="median"))
        row = {"shape": name, "m": m, "k": k, "n": n} | {key: statistics.median(v) for key, v in times.items()}
        row["rounds"] = times
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
        rows.append(row)
    with open(out, "w") as handle:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name(),
                   "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
