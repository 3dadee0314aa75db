"""Which attention each path runs, per zoo model at GPU size (bf16, inference): the scaled-dot-product-attention
kernels eager launches, and the aten ops fusionlab's captured graph holds for attention (an extern attention op, or
its math decomposed into matmuls and a softmax). Prints one JSON line per model.

    python benchmarks/attention_paths.py [MODELS...]
"""

from __future__ import annotations

import json
import re
import sys

import torch

import fusionlab as fl
from fusionlab import dynamo_backend, models

ATTENTION = re.compile(r"attention|fmha|flash|softmax|bmm", re.IGNORECASE)


def main(names: list[str]) -> None:
    for name in names or ["vit", "bert", "gpt2", "llama"]:
        model, inputs = models.build(name, size="gpu", device="cuda", dtype=torch.bfloat16)
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            model(**inputs)
            torch.cuda.synchronize()
        eager = sorted({e.name[:90] for e in prof.events() if ATTENTION.search(e.name)})
        torch._dynamo.reset()
        before = dynamo_backend.mark()
        with torch.no_grad():
            torch.compile(model, backend=fl.backend)(**inputs)
        ops: dict[str, int] = {}
        for graph in dynamo_backend.since(before):
            for node in graph.exploration.captured.graph_module.graph.nodes:
                text = str(node.target)
                if node.op == "call_function" and ATTENTION.search(text):
                    ops[text] = ops.get(text, 0) + 1
        print(json.dumps({"model": name, "attn_implementation": model.config._attn_implementation,
                          "eager_kernels": eager, "fusionlab_aten_ops": ops}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
