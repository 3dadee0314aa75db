"""cuBLAS on a vocabulary-wide output: the GEMM with N as the model has it (50257, 30522: the output's rows not
16-byte aligned) against the same GEMM on a weight padded with zero rows to a multiple of 8 or 64, the output then
read as a view or copied to a contiguous tensor; and Inductor's compiled GEMM. bf16, one run, medians of 5 rounds.

    python benchmarks/mm_padding.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import triton
import triton.testing

# (m, k, n): GPT-2 small's lm_head at 8x512 tokens, BERT-base's decoder at 16x256, Llama-style 32000 at 4x512.
SHAPES = {"gpt2_lm_head": (4096, 768, 50257), "bert_decoder": (4096, 768, 30522), "llama_lm_head": (2048, 2048, 32000)}


def _padded(w: torch.Tensor, multiple: int) -> torch.Tensor:
    n = w.shape[0]
    return torch.nn.functional.pad(w, (0, 0, 0, -n % multiple))


def _row(name: str, m: int, k: int, n: int) -> dict:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5  # nn.Linear's layout: (out, in)
    w8, w64 = _padded(w, 8), _padded(w, 64)
    compiled = torch.compile(lambda a, b: torch.mm(a, b.t()))
    runs = {"mm": lambda: torch.mm(x, w.t()),
            "pad8_view": lambda: torch.mm(x, w8.t())[:, :n],
            "pad8_contiguous": lambda: torch.mm(x, w8.t())[:, :n].contiguous(),
            "pad64_view": lambda: torch.mm(x, w64.t())[:, :n],
            "pad64_contiguous": lambda: torch.mm(x, w64.t())[:, :n].contiguous(),
            "inductor": lambda: compiled(x, w)}
    expected = runs["mm"]()
    for key, run in runs.items():  # correctness first
        torch.testing.assert_close(run(), expected, atol=2e-2, rtol=2e-2, msg=lambda s, key=key: f"{key}: {s}")
    times: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(5):  # rounds: each takes its turn
        for key, run in runs.items():
            times[key].append(triton.testing.do_bench(run, return_mode="median"))
    row = {"shape": name, "m": m, "k": k, "n": n} | {key: statistics.median(v) for key, v in times.items()}
    print(json.dumps(row), flush=True)
    return row | {"rounds": times}


def main(out: str) -> None:
    rows = [_row(name, *shape) for name, shape in SHAPES.items()]
    with open(out, "w") as handle:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name(),
                   "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
