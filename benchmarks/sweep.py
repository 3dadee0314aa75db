"""Launch-config and source-variant sweep of fusionlab's own kernels on the GPU, in one run.

For each single-kernel workload: our default program, Inductor, then the generated kernel relaunched with each
config of a small grid and with each source variant (a text edit of the generated kernel: the hypothesis under
test). Every variant that claims to be correct is checked against eager before it is timed; diagnostic variants
(`*_free`: an op replaced by something cheap, to see what it costs) are timed only.

    python benchmarks/sweep.py OUT.json [workload ...]
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
import triton.testing

import fusionlab as fl
from fusionlab.measure import workloads
from fusionlab.runtime.config import BlockConfig, KernelShape
from fusionlab.runtime.interpreter import build_module


def _drop_masks(source: str) -> str:
    """Every load and store unmasked, every `tl.where(mask, v, identity)` just `v` (valid when the sizes divide)."""
    source = re.sub(r", mask=(mask|xmask|rmask), other=0\)", ")", source)
    source = re.sub(r", mask=(mask|xmask|rmask)\)", ")", source)
    source = re.sub(r"tl\.where\(mask, ([a-z_0-9]+), [^)]+\)", r"\1", source)
    return source


def _rnumel_constexpr(source: str) -> str:
    return source.replace(", rnumel, XBLOCK", ", rnumel: tl.constexpr, XBLOCK")


def _erf_free(source: str) -> str:
    return re.sub(r"(?<!def )\b_erf\(", "(", source).replace("tl.erf(", "(")


def _libdevice_erf(source: str) -> str:
    """erf from libdevice (erff) instead of the preamble's `_erf`: what the selects cost."""
    return re.sub(r"(?<!def )\b_erf\(", "tl.erf(", source)


def _evict(source: str) -> str:
    """Inductor's hints for looped rows: the first pass keeps the row in L2 for the pass that re-reads it."""
    loops = source.split("for roffset in range(0, rnumel, RBLOCK):")
    if len(loops) < 3:
        return source
    loops[1] = loops[1].replace("other=0)", "other=0, eviction_policy='evict_last')")
    loops[-1] = loops[-1].replace("other=0)", "other=0, eviction_policy='evict_first')")
    return "for roffset in range(0, rnumel, RBLOCK):".join(loops)


def _pipelined(source: str) -> str:
    """Loops as `tl.range` with software pipelining: the next tiles' loads are issued before this one is used."""
    return source.replace("for roffset in range(0, rnumel, RBLOCK):",
                          "for roffset in tl.range(0, rnumel, RBLOCK, num_stages=3):")


_ROW_START = "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]\n"


def _grid_stride(stages: int) -> Callable[[str], str]:
    """A persistent kernel as a grid-stride loop over row blocks: a few programs per SM, each taking rows
    `num_programs` apart; with `stages` > 1 the next rows' loads are issued while this row is reduced."""
    def edit(source: str) -> str:
        head, found, body = source.partition(_ROW_START)
        if not found or "for roffset" in body:
            return source
        loop = (f"    for xstart in tl.range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK, "
                f"num_stages={stages}):\n        xindex = xstart + tl.arange(0, XBLOCK)[:, None]\n")
        body = "".join("    " + line if line.strip() else line for line in body.splitlines(keepends=True))
        return head + loop + body
    return edit


def _sizes_constexpr(source: str) -> str:
    """The domain's sizes as compile-time constants: divisions by them become multiplies and shifts."""
    head, found, rest = source.partition("(")
    signature, close, body = rest.partition(")")
    signature = re.sub(r"\b(size\d+)\b(?!:)", r"\1: tl.constexpr", signature)
    return head + found + signature + close + body


def _merged_rows(source: str) -> str:
    """Operands whose strides collapse over the row dimensions (a slice of a dense tensor) addressed by the flat
    row index, with no division (d0 * s0 + d1 * s1 + d2 * s2 == xindex * s2 when s0 = size1 * s1, s1 = size2 * s2)."""
    return re.sub(r"d0 \* (stride_\w+?)_0 \+ d1 \* \1_1 \+ d2 \* \1_2", r"xindex * \1_2", source)


VARIANTS: dict[str, tuple[Callable[[str], str], bool]] = {  # name -> (edit, checked against eager)
    "current": (lambda s: s, True),
    "nomask": (_drop_masks, True),
    "rconst": (_rnumel_constexpr, True),
    "rconst_nomask": (lambda s: _drop_masks(_rnumel_constexpr(s)), True),
    "erf_free": (_erf_free, False),
    "libdevice_erf": (_libdevice_erf, True),
    "evict": (_evict, True),
    "pipelined": (_pipelined, True),
    "pipelined_evict": (lambda s: _pipelined(_evict(s)), True),
    "rconst_evict": (lambda s: _rnumel_constexpr(_evict(s)), True),
    "evict_unroll": (lambda s: _evict(s).replace("for roffset in range(0, rnumel, RBLOCK):",
                                                 "for roffset in tl.range(0, rnumel, RBLOCK, loop_unroll_factor=2):"),
                     True),
    "gridstride": (_grid_stride(1), True),
    "gridstride_s2": (_grid_stride(2), True),
    "sizes_const": (_sizes_constexpr, True),
    "merged_rows": (_merged_rows, True),
    "merged_rows_sizes_const": (lambda s: _sizes_constexpr(_merged_rows(s)), True),
}


def _configs(kind: str, xnumel: int, rnumel: int, variant: str = "") -> list[tuple[int, int, int, int, int]]:
    """(XBLOCK, RBLOCK, num_warps, num_stages, programs per SM) to try for one kernel kind and variant;
    programs per SM is 0 for the usual grid (one program per block of rows)."""
    p2 = triton.next_power_of_2
    if variant.startswith("gridstride"):
        rblock = p2(rnumel)
        return [(x, rblock, w, 1, k) for x, w, k in itertools.product((1, 2), (8, 16), (1, 2, 4, 8))
                if x * rblock <= 16384 and w * 32 <= x * rblock]
    return [(*config, 0) for config in _plain_configs(kind, xnumel, rnumel)]


def _plain_configs(kind: str, xnumel: int, rnumel: int) -> list[tuple[int, int, int, int]]:
    p2 = triton.next_power_of_2
    if kind == "tiled" and p2(rnumel) <= 256:  # short rows (a head's width): more rows per tile, fewer per thread
        return [(x, p2(rnumel), w, 1) for x, w in itertools.product((4, 8, 16, 32, 64), (1, 2, 4, 8))
                if w * 32 <= x * p2(rnumel) <= 8192]
    if kind == "tiled":
        shapes = [(1, 4096), (2, 2048), (4, 1024), (8, 1024), (8, 512), (16, 256), (4, 2048), (16, 512)]
        return [(x, r, w, 1) for (x, r), w in itertools.product(shapes, (4, 8))]
    if kind == "outer_reduction":
        shapes = [(32, 64), (32, 128), (32, 256), (64, 64), (64, 128), (16, 256)]
        found = [(x, r, w, s) for (x, r), w, s in itertools.product(shapes, (8, 16, 32), (2, 3))
                 if x * r <= 16384 and w * 32 <= x * r]
        return found
    if kind == "looped":
        return [(x, r, w, 1) for x, r, w in itertools.product((1, 2), (1024, 2048, 4096), (4, 8, 16))
                if w * 32 <= x * r]
    rblock = p2(rnumel)
    if rblock > 32768:  # a whole vocabulary row in registers: one row per program, as many warps as allowed
        return [(1, rblock, w, 1) for w in (16, 32)]
    rows, warps = ((1, 2, 4, 8, 16), (1, 2, 4, 8, 16)) if rblock <= 2048 else ((1, 2, 4), (4, 8, 16, 32))
    return [(x, rblock, w, 1) for x, w in itertools.product(rows, warps)
            if x * rblock <= 32768 and w * 32 <= x * rblock]


def _time(fn: Callable[[], Any]) -> float:
    return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))


@triton.jit
def _column_partials(x_ptr, partial_ptr, rows, cols, chunk, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # split reduction, first kernel: program (column block, split) sums `chunk` rows of XBLOCK columns
    cindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    cmask = cindex < cols
    start = tl.program_id(1) * chunk
    acc = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    for offset in range(start, start + chunk, RBLOCK):
        rindex = offset + tl.arange(0, RBLOCK)[:, None]
        mask = (rindex < rows) & cmask
        acc += tl.load(x_ptr + rindex * cols + cindex, mask=mask, other=0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(1) * cols + cindex, tl.sum(acc, 0)[None, :], mask=cmask)


@triton.jit
def _column_finish(partial_ptr, out_ptr, splits, cols, XBLOCK: tl.constexpr, SBLOCK: tl.constexpr):
    cindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    sindex = tl.arange(0, SBLOCK)[:, None]
    mask = (sindex < splits) & (cindex < cols)
    values = tl.load(partial_ptr + sindex * cols + cindex, mask=mask, other=0)
    tl.store(out_ptr + cindex, tl.sum(values, 0)[None, :], mask=cindex < cols)


def _sm_count() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def _read_all(x_ptr, partial_ptr, numel, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    # read-only stream: each program sums blocks `num_programs` apart and writes one partial
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(tl.program_id(0) * BLOCK, numel, tl.num_programs(0) * BLOCK, num_stages=STAGES):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(acc, 0))


def read_ceiling() -> dict[str, Any]:
    """What reading a bf16 8192 x 8192 matrix once costs, against copying it: the floor of a reduction that
    reads everything and writes almost nothing (sum over either axis)."""
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    nbytes = x.numel() * x.element_size()
    row: dict[str, Any] = {"workload": "read_ceiling", "bytes": nbytes}
    copy = torch.empty_like(x)
    row["copy_ms"] = _time(lambda: copy.copy_(x))
    row["copy_tb_s"] = 2 * nbytes / row["copy_ms"] / 1e9
    for label, fn in (("eager_sum_rows", lambda: x.sum(0)), ("eager_sum_cols", lambda: x.sum(1)),
                      ("eager_sum_all", lambda: x.sum())):
        row[label + "_ms"] = _time(fn)
    results = []
    for block, warps, per_sm, stages in itertools.product((2048, 4096, 8192), (4, 8, 16), (2, 4, 8), (1, 3)):
        programs = per_sm * _sm_count()
        partial = torch.empty(programs, device="cuda", dtype=torch.float32)

        def run(block: int = block, warps: int = warps, programs: int = programs, stages: int = stages,
                partial: torch.Tensor = partial) -> torch.Tensor:
            _read_all[(programs,)](x, partial, x.numel(), BLOCK=block, STAGES=stages, num_warps=warps)
            return partial
        torch.testing.assert_close(run().sum(), x.float().sum(), atol=5.0, rtol=1e-3)
        results.append([[block, warps, per_sm, stages], _time(run)])
    results.sort(key=lambda r: r[1])
    row["triton_read"] = results[:8]
    row["read_tb_s"] = nbytes / results[0][1] / 1e9
    return row


def split_sum(x: torch.Tensor, splits: int, xblock: int, rblock: int, warps: int) -> Callable[[], torch.Tensor]:
    rows, cols = x.shape
    partial = torch.empty((splits, cols), dtype=torch.float32, device=x.device)
    out = torch.empty((cols,), dtype=x.dtype, device=x.device)
    chunk = triton.cdiv(triton.cdiv(rows, splits), rblock) * rblock

    def run() -> torch.Tensor:
        _column_partials[(triton.cdiv(cols, xblock), splits)](x, partial, rows, cols, chunk, XBLOCK=xblock,
                                                               RBLOCK=rblock, num_warps=warps)
        _column_finish[(triton.cdiv(cols, 128),)](partial, out, splits, cols, XBLOCK=128,
                                                 SBLOCK=triton.next_power_of_2(splits), num_warps=4)
        return out
    return run


def attention_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """gpt_block's attention softmax: scaled scores, a causal mask, softmax over rows of 1024."""
    return torch.softmax((scores * (1 / math.sqrt(128))).masked_fill(mask, float("-inf")), dim=-1)


def _attention_inputs() -> list[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    scores = torch.randn(4, 16, 1024, 1024, device="cuda", generator=generator).to(torch.bfloat16) * 8
    return [scores, torch.ones(1024, 1024, dtype=torch.bool, device="cuda").triu(1)]


def _short_rows(rows: int, columns: int) -> Callable[[], list[torch.Tensor]]:
    def build() -> list[torch.Tensor]:
        generator = torch.Generator(device="cuda").manual_seed(0)
        return [torch.randn(rows, columns, device="cuda", generator=generator).to(torch.bfloat16),
                torch.randn(columns, device="cuda", generator=generator).to(torch.bfloat16)]
    return build


def _softmax(x: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, weight.shape, weight)


def _rotary_q(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The query half of the suite's rotary_embedding (Llama 3 8B's 32 heads of 128, 4 x 2048 tokens)."""
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    return q * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


def _rotary_inputs() -> list[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(shape, device="cuda", generator=generator).to(torch.bfloat16)
            for shape in ((4, 32, 2048, 128), (4, 2048, 128), (4, 2048, 128))]


# Single kernels of multi-kernel workloads, and other row lengths, swept on their own:
# name -> (function, inputs on the GPU).
PARTS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "attention_softmax": (attention_softmax, _attention_inputs),
    "softmax_512": (_softmax, _short_rows(131072, 512)),
    "layer_norm_1024": (_layer_norm, _short_rows(65536, 1024)),
    "layer_norm_256_small": (_layer_norm, _short_rows(8192, 256)),
    "rotary_q": (_rotary_q, _rotary_inputs),
}


def sweep(label: str, budget_s: float) -> dict[str, Any]:
    name, _, mode = label.partition(":")  # "rms_norm:looped" forces looped reductions, ":persistent" whole rows
    if mode == "persistent":
        import fusionlab.codegen.plan as plan

        plan.PERSISTENT_LIMIT = 1 << 17
    if name in PARTS:
        fn, build = PARTS[name]
        inputs = build()
    else:
        fn, inputs = workloads.get(name).build("gpu", "cuda", torch.bfloat16)
    with torch.no_grad():
        expected = fn(*inputs)
    row: dict[str, Any] = {"workload": label}
    ex = fl.explore(fn, *inputs, looped_reductions=mode == "looped")
    got = ex(*inputs)
    torch.testing.assert_close(got.float(), expected.float(), atol=5e-2, rtol=2e-2)
    row["fusionlab_ms"] = _time(lambda: ex(*inputs))
    compiled = torch.compile(fn)
    compiled(*inputs)
    row["inductor_ms"] = _time(lambda: compiled(*inputs))
    row["eager_ms"] = _time(lambda: fn(*inputs))
    records = ex.compiled.record_launches(*inputs)
    if len(records) != 1:
        row["note"] = f"{len(records)} launches: only single-kernel programs are swept"
        return row
    handle, args, xnumel, rnumel = records[0]
    storages = {t.untyped_storage().data_ptr() for t in inputs}  # views of an input (slices) are inputs too
    output_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                        and a.untyped_storage().data_ptr() not in storages]
    target = args[output_positions[0]]
    row["kind"], row["default"] = handle.kind, str(handle.last_config)
    results: list[tuple[str, tuple[int, ...], float]] = []
    start = time.perf_counter()
    chosen = os.environ.get("SWEEP_VARIANTS")
    for variant, (edit, checked) in VARIANTS.items():
        if chosen and variant not in chosen.split(","):
            continue
        source = edit(handle.source)
        if source == handle.source and variant != "current":
            continue
        kernel = build_module(source, f"{handle.name}_{variant}", interpret=False)[handle.name]
        kind = "looped" if handle.kind == "reduction" and not handle.persistent else handle.kind
        for xblock, rblock, warps, stages, per_sm in _configs(kind, xnumel, rnumel, variant):
            if time.perf_counter() - start > budget_s:
                row["truncated"] = True
                break
            if "nomask" in variant and (xnumel % xblock or (handle.kind != "pointwise" and rnumel % rblock)):
                continue
            shape = KernelShape(handle.kind, xnumel, rnumel, handle.persistent, handle.heavy, handle.accumulators)
            config = BlockConfig(xblock, rblock, warps)
            grid = config.grid(shape)
            if per_sm:
                grid = (min(triton.cdiv(xnumel, xblock), per_sm * _sm_count()),)
            numels, meta = shape.numels, config.meta(shape)  # the launch's own size arguments and EVEN flags

            def launch(kernel: Any = kernel, grid: Any = grid, meta: Any = meta, numels: Any = numels,
                       warps: int = warps, stages: int = stages) -> None:
                kernel[grid](*args, *numels, num_warps=warps, num_stages=stages, **meta)
            try:
                target.zero_()
                launch()
                torch.cuda.synchronize()
            except Exception as error:  # noqa: BLE001 - a config that does not compile is reported, not fatal
                results.append((variant, (xblock, rblock, warps, stages, per_sm), float("nan")))
                row.setdefault("errors", []).append(f"{variant} {xblock},{rblock},{warps}: {type(error).__name__}")
                continue
            if checked:
                torch.testing.assert_close(target.float(), expected.float(), atol=5e-2, rtol=2e-2)
            results.append((variant, (xblock, rblock, warps, stages, per_sm), _time(launch)))
    row["results"] = [[v, list(c), t] for v, c, t in results]
    best: dict[str, tuple[float, Any]] = {}
    for variant, config, ms in results:
        if ms == ms and (variant not in best or ms < best[variant][0]):
            best[variant] = (ms, config)
    row["best"] = {v: [ms, list(c)] for v, (ms, c) in best.items()}
    if name == "sum_rows":
        x = inputs[0]
        split_results = []
        for splits, xblock, rblock, warps in itertools.product((8, 16, 32), (64, 128), (32, 64), (4, 8)):
            run = split_sum(x, splits, xblock, rblock, warps)
            torch.testing.assert_close(run().float(), expected.float(), atol=5e-1, rtol=2e-2)
            split_results.append([[splits, xblock, rblock, warps], _time(run)])
        row["split"] = sorted(split_results, key=lambda r: r[1])[:8]
    return row


def main(out: str, names: list[str]) -> None:
    rows = []
    budget = float(os.environ.get("SWEEP_BUDGET", "40"))
    for name in names:
        row = read_ceiling() if name == "read_ceiling" else sweep(name, budget)
        rows.append(row)
        summary = {k: row[k] for k in ("workload", "fusionlab_ms", "inductor_ms", "default") if k in row}
        print(json.dumps(summary), json.dumps(row.get("best")), json.dumps(row.get("split", [])[:3]), flush=True)
        with open(out, "w") as handle:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name(),
                       "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["rms_norm", "gelu_bias", "sum_rows", "column_normalize", "layer_norm",
                                       "softmax"])
