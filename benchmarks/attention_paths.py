"""Which attention each path runs, per zoo model at GPU size (bf16, inference): the scaled-dot-product-attention
kernels eager launches, and the aten ops fusionlab's captured graph holds for attention (an extern attention op, or
its math decomposed into matmuls and a softmax). Prints one JSON line per model; with `--graph`, also the captured
nodes of the first attention (from the first matmul before the first softmax to the matmul after it), with each
node's shape and dtype, and which attentions `fusionlab.decompose.attention.match` finds.

    python benchmarks/attention_paths.py [--graph] [MODELS...]
"""

from __future__ import annotations

import json
import re
import sys

import torch

import fusionlab as fl
from fusionlab import dynamo_backend, models
from fusionlab.decompose import attention

ATTENTION = re.compile(r"attention|fmha|flash|softmax|bmm", re.IGNORECASE)


def _described(node: torch.fx.Node) -> str:
    value = node.meta.get("val")
    meta = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
    args = ", ".join(str(a) for a in node.args)
    return f"{node.name} = {node.target}({args}) {dict(node.kwargs) or ''} -> {meta}"


def first_attention(graph_module: torch.fx.GraphModule) -> list[str]:
    """The nodes from the matmul before the first softmax to the matmul after it."""
    nodes = list(graph_module.graph.nodes)
    soft = next((i for i, n in enumerate(nodes) if n.op == "call_function" and "softmax" in str(n.target)), None)
    if soft is None:
        return []
    products = [i for i, n in enumerate(nodes)
                if n.op == "call_function" and re.search(r"bmm|mm|matmul", str(n.target))]
    start = max([i for i in products if i < soft], default=max(0, soft - 30))
    end = min([i for i in products if i > soft], default=min(len(nodes) - 1, soft + 20))
    shown = [_described(n) for n in nodes[max(0, start - 12): end + 3]]
    added = nodes[soft].args[0]  # an additive mask: where it comes from, up to 8 nodes back
    if isinstance(added, torch.fx.Node) and "add" in str(added.target):
        chain, todo = [], [a for a in added.args[1:] if isinstance(a, torch.fx.Node)]
        while todo and len(chain) < 8:
            node = todo.pop(0)
            chain.append("mask <- " + _described(node))
            todo += [a for a in node.all_input_nodes if a.op != "placeholder"]
        shown += chain
    return shown


def main(names: list[str], graph: bool = False) -> None:
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
        shown: list[str] = []
        matched = 0
        for backend_graph in dynamo_backend.since(before):
            graph_module = backend_graph.exploration.captured.graph_module
            for node in graph_module.graph.nodes:
                text = str(node.target)
                if node.op == "call_function" and ATTENTION.search(text):
                    ops[text] = ops.get(text, 0) + 1
            matched += len(attention.match(graph_module))
            shown = shown or (first_attention(graph_module) if graph else [])
        print(json.dumps({"model": name, "attn_implementation": model.config._attn_implementation,
                          "eager_kernels": eager, "fusionlab_aten_ops": ops, "matched": matched}), flush=True)
        if shown:
            print("\n".join(shown), flush=True)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main([a for a in arguments if a != "--graph"], graph="--graph" in arguments)
