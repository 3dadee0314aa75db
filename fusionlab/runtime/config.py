"""Launch configurations: block sizes and warps chosen per shape at run time (never baked into source).

Every kernel is launched through one protocol: a `LaunchShape` (the work of one launch) chooses its `LaunchConfig`
and lists the candidates the autotuner measures; the config gives the grid for the shape, its constexpr keyword
arguments and launch options, and describes itself. `KernelShape` and `BlockConfig` (XBLOCK, RBLOCK) are the
pointwise and reduction kernels'; `runtime/matmul.py` has the matmul's.

    >>> KernelShape("pointwise", 1 << 20, 1, False).choose("cuda")
    BlockConfig(XBLOCK=1024, RBLOCK=1, num_warps=4)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import triton

from fusionlab.codegen.kinds import KernelKind


class LaunchConfig(Protocol):
    """One launch's choices: its grid, constexprs (`meta`) and launch options for a shape of its kind."""

    def grid(self, shape: Any) -> tuple[int, ...]: ...

    def meta(self, shape: Any) -> dict[str, Any]: ...

    def options(self) -> dict[str, int]: ...

    def describe(self) -> str: ...


class LaunchShape(Protocol):
    """The work of one launch, what its config is chosen from (hashable: configs are kept per shape)."""

    @property
    def numels(self) -> tuple[int, ...]: ...  # the size arguments after the kernel's own

    @property
    def empty(self) -> bool: ...  # nothing to launch

    def choose(self, backend: str) -> LaunchConfig: ...

    def candidates(self) -> list[LaunchConfig]: ...


@dataclass(frozen=True)
class KernelShape:
    kind: KernelKind  # "tiled": pointwise over [rows, last dimension]
    xnumel: int
    rnumel: int
    persistent: bool
    heavy: int = 0  # special-function ops and extra full-size stores per element
    accumulators: int = 1  # [XBLOCK, RBLOCK] tiles a looped reduction keeps live at once (Welford: 3)
    tile_bytes: int = 0  # bytes per element of the tiles a pipelined loop loads (codegen's KernelSource.tile_bytes)

    @property
    def numels(self) -> tuple[int, ...]:
        return (self.xnumel,) if self.kind == "pointwise" else (self.xnumel, self.rnumel)

    @property
    def empty(self) -> bool:
        return False  # launched even so: a reduction over an empty axis still writes its identity

    def choose(self, backend: str) -> BlockConfig:
        return choose(self, backend)

    def candidates(self) -> list[LaunchConfig]:
        return list(candidates(self))


@dataclass(frozen=True)
class BlockConfig:
    XBLOCK: int
    RBLOCK: int
    num_warps: int

    def grid(self, shape: KernelShape) -> tuple[int, ...]:
        rows = max(1, triton.cdiv(shape.xnumel, self.XBLOCK))
        if shape.kind == "tiled":
            return (rows, max(1, triton.cdiv(shape.rnumel, self.RBLOCK)))
        return (rows,)

    def meta(self, shape: KernelShape) -> dict[str, Any]:
        """Blocks, and whether each size divides its block (the kernel then drops that bounds mask)."""
        # An empty size "divides" every block, but then no index is in bounds: it keeps its mask.
        meta: dict[str, Any] = {"XBLOCK": self.XBLOCK, "EVEN_X": shape.xnumel > 0 and shape.xnumel % self.XBLOCK == 0}
        if shape.kind != "pointwise":
            meta |= {"RBLOCK": self.RBLOCK, "EVEN_R": shape.rnumel > 0 and shape.rnumel % self.RBLOCK == 0}
        return meta

    def options(self) -> dict[str, int]:
        return {"num_warps": self.num_warps}

    def smaller(self, shape: KernelShape) -> BlockConfig | None:
        """The next config down, for a kernel this one's blocks do not fit (Triton's OutOfResources: a pipelined
        loop keeps a tile of every operand per stage in shared memory): RBLOCK halved down to 16, then XBLOCK; None
        at the bottom. A persistent reduction holds its whole row (RBLOCK is the row, never less): XBLOCK, then the
        warps."""
        xblock, rblock, warps = self.XBLOCK, self.RBLOCK, self.num_warps
        if shape.persistent:
            if xblock > 1:
                xblock //= 2
            elif warps > 1:
                warps //= 2
            else:
                return None
            return BlockConfig(xblock, rblock, warps)
        if rblock > 16 and shape.kind != "pointwise":
            rblock //= 2
        elif xblock > 1:
            xblock //= 2
        else:
            return None
        return BlockConfig(xblock, rblock, max(1, min(warps, xblock * rblock // 32)))

    def describe(self) -> str:
        return f"XBLOCK={self.XBLOCK} RBLOCK={self.RBLOCK} warps={self.num_warps}"


def _interpreter(shape: KernelShape) -> BlockConfig:
    # The interpreter runs one program at a time through numpy: few, large programs are fastest.
    if shape.kind == "pointwise":
        return BlockConfig(min(triton.next_power_of_2(max(shape.xnumel, 1)), 1 << 16), 1, 1)
    if shape.kind == "tiled":
        rblock = min(triton.next_power_of_2(max(shape.rnumel, 1)), 1 << 12)
        return BlockConfig(max(1, min(triton.next_power_of_2(max(shape.xnumel, 1)), (1 << 16) // rblock)), rblock, 1)
    rblock = triton.next_power_of_2(max(shape.rnumel, 1)) if shape.persistent else 1024
    if shape.kind == "outer_reduction":
        rblock = min(64, triton.next_power_of_2(max(shape.rnumel, 1)))
    xblock = max(1, min(triton.next_power_of_2(max(shape.xnumel, 1)), (1 << 16) // rblock))
    return BlockConfig(xblock, rblock, 1)


def _tiled(shape: KernelShape, elements: int, rblock_cap: int) -> BlockConfig:
    rblock = min(triton.next_power_of_2(max(shape.rnumel, 1)), rblock_cap)
    xblock = max(1, min(triton.next_power_of_2(max(shape.xnumel, 1)), elements // rblock))
    return BlockConfig(xblock, rblock, 4 if xblock * rblock >= 512 else 1)


SHORT_OUTER_ROWS = 8  # an outer reduction over this many rows or fewer takes them all in one tile


def _short_outer(shape: KernelShape) -> BlockConfig:
    """A few rows (Llama's key and value gradients, summed over the query heads that share them: 2 rows of
    4 x 8 x 1024 x 64): 16 rows a step left most of each tile masked, in programs of 64 elements. All the rows at
    once, 4096 elements a program, 2 warps: of 22 configs on three such sums (2, 4 and 8 rows) on an H100, at or near
    the best on each, 1.9-3.2x faster than 32 x 16 (docs/PERFORMANCE.md, round 20). More running tiles (a Welford
    pass, several sums sharing the loop) keep the same registers per thread as the two sums measured: elements x
    tiles at most 8192."""
    per_tile = 8192 // max(1, shape.accumulators)
    elements = min(4096, 1 << (per_tile.bit_length() - 1))  # the largest power of two within per_tile
    rblock = triton.next_power_of_2(shape.rnumel)
    xblock = max(1, min(triton.next_power_of_2(max(shape.xnumel, 1)), elements // rblock))
    while xblock > 32 and pipelined_bytes(xblock, rblock, shape.tile_bytes) > shared_memory():
        xblock //= 2
    return BlockConfig(xblock, rblock, 2)


def _cuda(shape: KernelShape) -> BlockConfig:
    if shape.kind == "tiled":
        # Short rows (a head's width) take 2048 elements a program: the rotary embedding's query kernel (4 x 32 x
        # 2048 rows of 128, five operands) took 0.0408 ms at 16 x 128 against 0.0471 at 32 x 128, both 4 warps (H200
        # sweep, docs/PERFORMANCE.md, eleventh round); long rows keep 4096 (gelu_bias: no config was better).
        return _tiled(shape, 2048 if triton.next_power_of_2(max(shape.rnumel, 1)) <= 256 else 4096, 1024)
    if shape.kind == "outer_reduction" and 0 < shape.rnumel <= SHORT_OUTER_ROWS:
        return _short_outer(shape)
    if shape.kind == "outer_reduction":
        # 32 columns (64 contiguous bytes of bf16) by up to 256 rows, 8 warps, with the loop software-pipelined
        # (kernel.py): among the best of 36-72 configs per workload on an H200 (docs/PERFORMANCE.md): a sum over
        # axis 0 of 8192 x 8192 0.045 ms (16 x 128 unpipelined 0.052; 128 x 16 0.083), column_normalize 0.129 ms.
        # Narrower when there are too few columns to fill the GPU.
        xblock = 32 if shape.xnumel >= 4096 else 16
        xblock = min(xblock, triton.next_power_of_2(max(shape.xnumel, 1)))
        # Welford's three running tiles at 32 x 256 spill: 0.196 ms against 0.147 at 32 x 128 (column_normalize).
        cap = 256 if shape.accumulators < 3 else 128
        rblock = max(16, min(cap, triton.next_power_of_2(max(shape.rnumel, 1))))
        # The pipelined loop stages its tiles in shared memory: fewer rows a step where they would not fit (a
        # batch-norm backward of a residual block reads eight tiles; else its first launch steps down).
        while rblock > 16 and pipelined_bytes(xblock, rblock, shape.tile_bytes) > shared_memory():
            rblock //= 2
        return BlockConfig(xblock, rblock, max(1, min(8, xblock * rblock // 256)))
    if shape.kind == "pointwise":
        xblock = min(1024, triton.next_power_of_2(max(shape.xnumel, 1)))
        return BlockConfig(xblock, 1, 4 if xblock >= 512 else max(1, xblock // 128))
    if shape.persistent:
        rblock = triton.next_power_of_2(max(shape.rnumel, 1))
        # Enough rows per program to give each warp work, without spilling the row out of registers.
        xblock = max(1, min(triton.next_power_of_2(max(shape.xnumel, 1)), 2048 // rblock))
        if rblock <= 1024:
            # Short rows: one warp reduces its rows with shuffles alone, no shared-memory round trip between warps.
            # On an H200 (docs/PERFORMANCE.md, eighth round), 2048 elements per one-warp program were at or near
            # the best of 25 configs on four kernels: gpt_block's attention softmax (65536 rows of 1024) 0.073 ms
            # against 0.095 with 8 warps; softmax over 512, layer_norm over 1024 and over 256.
            return BlockConfig(xblock, rblock, 1)
        # Measured on an H200 (docs/PERFORMANCE.md): at 8192 elements a row with special functions (softmax's exp)
        # or two outputs wants 16 warps to hide latency; a plain normalisation is faster with 8.
        return BlockConfig(xblock, rblock, 16 if shape.heavy and xblock * rblock >= 8192 else 8)
    return BlockConfig(1, 2048, 8)


PIPELINE_BUFFERS = 2  # tiles of each operand in shared memory at once: Triton's pipeliner at num_stages=3
PIPELINE_SLACK = 16 << 10  # the rest of a pipelined kernel's shared memory (its reductions' scratch), at most


def pipelined_bytes(xblock: int, rblock: int, tile_bytes: int) -> int:
    """The shared memory a pipelined loop over [xblock, rblock] tiles asks for, `tile_bytes` a tile element
    (Triton's figure for our outer reductions compiled for sm_90 was within PIPELINE_SLACK of it:
    tests/test_pipelined_blocks.py)."""
    return PIPELINE_BUFFERS * xblock * rblock * tile_bytes + PIPELINE_SLACK


@functools.cache
def _shared_memory(device: int) -> int:
    from triton.runtime.driver import driver  # (its CUDA driver: only where a GPU is)

    return int(driver.active.utils.get_device_properties(device)["max_shared_mem"])  # Triton's own limit


def shared_memory() -> int:
    """The shared memory one program may use on the current CUDA device (227 KiB on an H100 or H200; that,
    without a device)."""
    return _shared_memory(torch.cuda.current_device()) if torch.cuda.is_available() else 227 << 10


def choose(shape: KernelShape, backend: str) -> BlockConfig:
    """Block sizes for one launch; `backend` is "cuda" or "interpreter"."""
    return _interpreter(shape) if backend == "interpreter" else _cuda(shape)


def candidates(shape: KernelShape) -> list[BlockConfig]:
    """The small config space the autotuner measures on CUDA (the heuristic's choice is always included)."""
    base = _cuda(shape)
    found = [base]
    if shape.kind == "tiled":
        for elements in (1024, 2048, 4096):
            for cap in (256, 1024):
                for warps in (4, 8):
                    config = _tiled(shape, elements, cap)
                    found.append(BlockConfig(config.XBLOCK, config.RBLOCK, warps))
    elif shape.kind == "pointwise":
        for xblock in (512, 1024, 2048, 4096):
            for warps in (4, 8):
                found.append(BlockConfig(min(xblock, triton.next_power_of_2(max(shape.xnumel, 1))), 1, warps))
    elif shape.persistent:
        rblock = triton.next_power_of_2(max(shape.rnumel, 1))
        for rows in (1, 2, 4, 8):
            if rows * rblock > 32768 or rows > triton.next_power_of_2(max(shape.xnumel, 1)):
                continue
            for warps in (1, 2, 4, 8, 16, 32):
                if warps * 32 <= rows * rblock:
                    found.append(BlockConfig(rows, rblock, warps))
    elif shape.kind == "outer_reduction":
        for xblock, rblock in ((32, 64), (32, 128), (32, 256), (64, 128), (16, 256), (64, 64)):
            for warps in (8, 16):
                found.append(BlockConfig(min(xblock, triton.next_power_of_2(max(shape.xnumel, 1))), rblock, warps))
    else:
        for rblock in (1024, 2048, 4096):
            for warps in (4, 8, 16):
                found.append(BlockConfig(1, rblock, warps))
    return list(dict.fromkeys(found))
