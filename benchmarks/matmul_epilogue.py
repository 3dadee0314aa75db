"""Matmul epilogues on the GPU: extern cuBLAS + a fused epilogue kernel vs one Triton matmul with the epilogue fused.

For each shape, correctness is asserted first (every fusionlab variant and every tile config against eager), then
medians (triton.testing.do_bench) of: eager, Inductor (torch.compile, default mode), cuBLAS addmm alone (the
floor of the extern path), fusionlab matmul="extern", fusionlab matmul="triton" with the heuristic config, and
fusionlab matmul="triton" pinned to each candidate config. Prints a table and writes JSON.

    python benchmarks/matmul_epilogue.py results/matmul_epilogue.json            # ~2-3 minutes on an H200
    python benchmarks/matmul_epilogue.py out.json --shapes linear_gelu --no-candidates

Needs CUDA; works with torch 2.11 + triton 3.6 and torch 2.13 + triton 3.9.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fusionlab as fl  # noqa: E402
from fusionlab.measure.workloads import get  # noqa: E402
from fusionlab.runtime.launch import KernelHandle  # noqa: E402
from fusionlab.runtime.matmul import MatmulShape, choose_matmul, matmul_candidates  # noqa: E402

TOLERANCE = {"atol": 4e-2, "rtol": 4e-2}  # bf16 outputs of a K-long float32 accumulation, rounded differently


def linear_bias_gelu(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gpt-style MLP up-projection: F.linear with an [N, K] weight (read transposed by the matmul)."""
    return F.gelu(F.linear(x, weight_t, bias))


def _random(shape: tuple[int, ...], scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=generator) * scale).to(torch.bfloat16)


def shapes() -> dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], tuple[int, int, int]]]:
    """name -> (function, bf16 inputs, (M, N, K))."""
    workload = get("linear_gelu")
    fn, inputs = workload.build("gpu", "cuda")
    m, k = inputs[0].shape
    n = inputs[1].shape[1]
    square = 4096
    gpt_rows, gpt_inner, gpt_columns = 4096, 2048, 8192
    return {
        "linear_gelu": (fn, tuple(inputs), (m, n, k)),
        "square_4096_bias_gelu": (workload.fn, (_random((square, square)), _random((square, square), square ** -0.5, 1),
                                                _random((square,), seed=2)), (square, square, square)),
        "gpt_linear_gelu_4096x2048x8192": (
            linear_bias_gelu, (_random((gpt_rows, gpt_inner)), _random((gpt_columns, gpt_inner), gpt_inner ** -0.5, 1),
                               _random((gpt_columns,), seed=2)), (gpt_rows, gpt_columns, gpt_inner)),
    }


def median_ms(fn: Callable[[], Any]) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def check(name: str, label: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    try:
        torch.testing.assert_close(actual.float(), expected.float(), **TOLERANCE)
    except AssertionError as error:
        raise AssertionError(f"{name} / {label}: fusionlab differs from eager: {error}") from error


def matmul_handle(ex: fl.Exploration) -> KernelHandle:
    found = [h for h in ex.compiled.handles if h.kind == "matmul"]
    if len(found) != 1:
        raise AssertionError(f"expected one Triton matmul kernel, found {len(found)}:\n{ex.fused.as_text()}")
    return found[0]


def measure(name: str, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], sizes: tuple[int, int, int],
            candidates: bool, max_autotune: bool) -> list[dict[str, Any]]:
    m, n, k = sizes
    flops = 2.0 * m * n * k
    moved = sum(t.numel() * t.element_size() for t in inputs) + m * n * 2  # inputs once, the bf16 output once
    rows: list[dict[str, Any]] = []

    def row(variant: str, milliseconds: float, **extra: Any) -> None:
        rows.append({"shape": name, "M": m, "N": n, "K": k, "variant": variant, "ms": milliseconds,
                     "tflops": flops / (milliseconds * 1e-3) / 1e12, "min_bytes": moved, **extra})
        print(f"  {variant:44s} {milliseconds:8.4f} ms  {rows[-1]['tflops']:6.1f} TFLOP/s", flush=True)

    print(f"{name}: [{m}, {k}] @ [{k}, {n}] bf16, {flops / 1e12:.2f} TFLOP, {moved / 1e6:.0f} MB at least", flush=True)
    with torch.no_grad():
        expected = fn(*inputs)
        # correctness first: both fusionlab paths and (below) every candidate config
        extern = fl.explore(fn, *inputs, matmul="extern")
        check(name, "matmul=extern", extern(*inputs), expected)
        start = time.perf_counter()
        fused = fl.explore(fn, *inputs, matmul="triton")
        check(name, "matmul=triton", fused(*inputs), expected)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        handle = matmul_handle(fused)
        heuristic = choose_matmul(MatmulShape(m, n, k, 2), "cuda")
        torch._dynamo.reset()  # a fresh compile per shape: else a new shape of the same function compiles dynamic
        inductor = torch.compile(fn)
        check(name, "inductor", inductor(*inputs), expected)
        if max_autotune:
            tuned = torch.compile(fn, mode="max-autotune-no-cudagraphs")
            check(name, "inductor max-autotune", tuned(*inputs), expected)

        row("eager", median_ms(lambda: fn(*inputs)))
        row("inductor (torch.compile default)", median_ms(lambda: inductor(*inputs)))
        if max_autotune:
            row("inductor max-autotune-no-cudagraphs", median_ms(lambda: tuned(*inputs)))
        x, weight, bias = inputs
        if fn is linear_bias_gelu:
            row("cuBLAS linear alone (no gelu)", median_ms(lambda: F.linear(x, weight, bias)))
        else:
            row("cuBLAS addmm alone (no gelu)", median_ms(lambda: torch.addmm(bias, x, weight)))
        row("fusionlab matmul=extern", median_ms(lambda: extern(*inputs)),
            kernels=len(extern.compiled.handles))
        row("fusionlab matmul=triton (heuristic)", median_ms(lambda: fused(*inputs)),
            config=heuristic.describe(), kernels=len(fused.compiled.handles), first_call_s=compile_s)
        if candidates:
            for config in matmul_candidates(MatmulShape(m, n, k, 2)):
                handle.pin(config)
                try:
                    check(name, config.describe(), fused(*inputs), expected)
                except AssertionError:
                    raise
                except Exception as error:  # noqa: BLE001 - e.g. out of shared memory: recorded, not fatal
                    print(f"  {config.describe():44s} failed: {type(error).__name__}: {error}", flush=True)
                    rows.append({"shape": name, "variant": f"triton {config.describe()}", "error": str(error)})
                    continue
                row(f"triton {config.describe()}", median_ms(lambda: fused(*inputs)), config=config.describe())
            handle.pin(None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="path of the JSON file to write")
    parser.add_argument("--shapes", nargs="*", help="names of shapes to run (default: all)")
    parser.add_argument("--no-candidates", action="store_true", help="skip timing each candidate config")
    parser.add_argument("--max-autotune", action="store_true",
                        help="also time Inductor's max-autotune (adds minutes of autotuning)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("matmul_epilogue.py needs a CUDA device")
    started = time.perf_counter()
    table = shapes()
    unknown = set(args.shapes or ()) - set(table)
    if unknown:
        raise SystemExit(f"unknown shapes {sorted(unknown)}: choose from {sorted(table)}")
    rows: list[dict[str, Any]] = []
    for name, (fn, inputs, sizes) in table.items():
        if args.shapes and name not in args.shapes:
            continue
        rows += measure(name, fn, inputs, sizes, not args.no_candidates, args.max_autotune)
        torch.cuda.empty_cache()
    print("\nsummary (median ms; best Triton config per shape):")
    for name in dict.fromkeys(r["shape"] for r in rows):
        mine = {r["variant"]: r["ms"] for r in rows if r["shape"] == name and "ms" in r}
        best = min(((v, ms) for v, ms in mine.items() if v.startswith("triton ") or "matmul=triton" in v),
                   key=lambda item: item[1])
        inductor = mine["inductor (torch.compile default)"]
        print(f"  {name:34s} inductor {inductor:.4f}  extern {mine['fusionlab matmul=extern']:.4f}  "
              f"triton heuristic {mine['fusionlab matmul=triton (heuristic)']:.4f}  best {best[1]:.4f} ({best[0]})  "
              f"inductor/best {inductor / best[1]:.3f}")
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "seconds": round(time.perf_counter() - started, 1)}
    directory = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(directory, exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1,
                  default=lambda value: None if isinstance(value, float) and math.isnan(value) else str(value))
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
