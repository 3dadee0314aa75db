"""Code-generator variants on the GPU, timed in one run (prediction/outcome notes in docs/PERFORMANCE.md).

    python benchmarks/variants.py
"""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.testing

import fusionlab as fl
from fusionlab import workloads
from fusionlab.codegen.kernel import KernelWriter

VARIANTS = {
    "current": {},
    "no_cache_hints": {"_eviction": lambda self, index_map: ""},
    "flat_pointwise": {"_wants_tile": lambda self: False},
}


def main(names: list[str]) -> None:
    rows = []
    for name in names:
        fn, inputs = workloads.get(name).build("gpu", "cuda", torch.bfloat16)
        expected = fn(*inputs)
        inductor = torch.compile(fn)
        inductor(*inputs)
        t_ind = triton.testing.do_bench(lambda f=inductor, xs=inputs: f(*xs), return_mode="median")
        row = {"workload": name, "inductor_ms": t_ind}
        for variant, patches in [*VARIANTS.items(), ("autotune", {})]:
            saved = {k: getattr(KernelWriter, k) for k in patches}
            for key, value in patches.items():
                setattr(KernelWriter, key, value)
            try:
                ex = fl.explore(fn, *inputs, autotune=variant == "autotune")
                got = ex(*inputs)
                for a, e in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)):
                    torch.testing.assert_close(a.float(), e.float(), atol=5e-2, rtol=5e-2)
                row[variant] = triton.testing.do_bench(lambda ex=ex, inputs=inputs: ex(*inputs), return_mode="median")
                if variant == "autotune":
                    row["tuned"] = [k.config for k in ex.compiled.kernels]
            finally:
                for key, value in saved.items():
                    setattr(KernelWriter, key, value)
        rows.append(row)
        print(json.dumps(row), flush=True)
    for row in rows:
        cells = " ".join(f"{k}={row[k]:.4f}" for k in ("inductor_ms", *VARIANTS, "autotune"))
        print(f"{row['workload']:18s} {cells} tuned={row['tuned']}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["rms_norm", "residual_chain", "layer_norm", "gelu_bias", "softmax", "swiglu"])
