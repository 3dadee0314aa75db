"""One-command GPU check: correctness of fusionlab kernels on CUDA, then medians vs eager and Inductor.

    python benchmarks/gpu_smoke.py --out results/
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
import torch.nn.functional as F
import triton
import triton.testing

import fusionlab as fl


def workloads(dtype: torch.dtype) -> dict:
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=dtype)
    r = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    return {
        "gelu_bias": (lambda x, b: F.gelu(x + b), (x, b)),
        "softmax": (lambda x: torch.softmax(x, -1), (x,)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b)),
        "rms_norm": (lambda x, w: F.rms_norm(x, (n,), w), (x, w)),
        "swiglu": (lambda a, b: F.silu(a) * b, (x, r)),
        "add_layer_norm": (lambda x, r, w, b: (x + r, F.layer_norm(x + r, (n,), w, b)), (x, r, w, b)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="results")
    parser.add_argument("--autotune", action="store_true", help="time a small config space per kernel")
    args = parser.parse_args()
    import os

    os.makedirs(args.out, exist_ok=True)
    copy_src = torch.randn(1 << 28, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    copy_ms = triton.testing.do_bench(lambda: copy_dst.copy_(copy_src), return_mode="median")
    bandwidth = 2 * copy_src.numel() * 4 / (copy_ms * 1e-3)
    rows = []
    for name, (fn, inputs) in workloads(torch.bfloat16).items():
        ex = fl.explore(fn, *inputs, autotune=args.autotune)
        start = time.perf_counter()
        ex.compiled  # noqa: B018
        ours = ex(*inputs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        eager = fn(*inputs)
        for a, e in zip(torch.utils._pytree.tree_leaves(ours), torch.utils._pytree.tree_leaves(eager)):
            torch.testing.assert_close(a.float(), e.float(), atol=3e-2, rtol=3e-2)
        inductor = torch.compile(fn)
        inductor(*inputs)
        t_eager = triton.testing.do_bench(lambda: fn(*inputs), return_mode="median")
        t_ours = triton.testing.do_bench(lambda: ex(*inputs), return_mode="median")
        t_ind = triton.testing.do_bench(lambda: inductor(*inputs), return_mode="median")
        outs = torch.utils._pytree.tree_leaves(eager)
        minimal = sum(t.numel() * t.element_size() for t in inputs) + sum(t.numel() * t.element_size() for t in outs)
        row = {"workload": name, "eager_ms": t_eager, "fusionlab_ms": t_ours, "inductor_ms": t_ind,
               "fusionlab_pct": minimal / (t_ours * 1e-3) / bandwidth * 100,
               "inductor_pct": minimal / (t_ind * 1e-3) / bandwidth * 100,
               "kernels": len(ex.compiled.handles), "compile_s": compile_s,
               "configs": [dict(vars(h.last_config)) for h in ex.compiled.handles]}
        row["tuning"] = [list(k.tuning[:6]) for k in ex.compiled.kernels]
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "copy_bandwidth_bytes_per_s": bandwidth, "date": time.strftime("%Y-%m-%d"), "python": platform.python_version()}
    with open(os.path.join(args.out, "gpu_smoke_autotune.json" if args.autotune else "gpu_smoke.json"), "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)
    print(json.dumps(meta))
    for r in rows:
        print(f"{r['workload']:16s} eager {r['eager_ms']:.3f} ours {r['fusionlab_ms']:.3f} ({r['fusionlab_pct']:.0f}%) "
              f"inductor {r['inductor_ms']:.3f} ({r['inductor_pct']:.0f}%) ratio {r['inductor_ms']/r['fusionlab_ms']:.2f}")


if __name__ == "__main__":
    main()
