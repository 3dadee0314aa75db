"""Launch configs of generated matmul kernels: tile configs chosen per shape (M, N, K) at run time.

A matmul kernel takes BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M and EVEN_K as constexprs, and warps and pipeline stages
as launch options; none of them is in its source. `MatmulShape` and `MatmulConfig` implement the launch protocol of
`runtime/config.py`: `choose_matmul` is the heuristic, `matmul_candidates` the small space the autotuner
(`autotune=True`) measures, sized for Hopper (H100/H200) with 16-bit operands.

    >>> choose_matmul(MatmulShape(8192, 16384, 4096, 2), "cuda")
    MatmulConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton

from fusionlab.runtime.config import LaunchConfig

SM_COUNT_H200 = 132  # programs that run at once, one per SM, on an H100/H200


@dataclass(frozen=True)
class MatmulShape:
    """The product's sizes ([M, K] @ [K, N]) and its operands' bytes per element."""

    m: int
    n: int
    k: int
    itemsize: int = 2

    @classmethod
    def of(cls, args: tuple[Any, ...], xnumel: int, rnumel: int) -> MatmulShape:
        """A launch's shape: K is the kernel's last positional argument, the left operand its first."""
        return cls(int(xnumel), int(rnumel), int(args[-1]), args[0].element_size())

    @property
    def numels(self) -> tuple[int, ...]:
        return (self.m, self.n)

    @property
    def empty(self) -> bool:
        return self.m == 0 or self.n == 0  # nothing to write (and `% size` in the kernel would divide by zero)

    def choose(self, backend: str) -> MatmulConfig:
        return choose_matmul(self, backend)

    def candidates(self) -> list[LaunchConfig]:
        return list(matmul_candidates(self))


@dataclass(frozen=True)
class MatmulConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int

    def grid(self, shape: MatmulShape) -> tuple[int]:
        return (max(1, triton.cdiv(shape.m, self.BLOCK_M) * triton.cdiv(shape.n, self.BLOCK_N)),)

    def meta(self, shape: MatmulShape) -> dict[str, int | bool]:
        """The kernel's constexprs for this shape."""
        return {"BLOCK_M": self.BLOCK_M, "BLOCK_N": self.BLOCK_N, "BLOCK_K": self.BLOCK_K, "GROUP_M": self.GROUP_M,
                "EVEN_K": shape.k % self.BLOCK_K == 0}

    def options(self) -> dict[str, int]:
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}

    def describe(self) -> str:
        return (f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} GROUP_M={self.GROUP_M} warps={self.num_warps} "
                f"stages={self.num_stages}")


# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) for 16-bit operands on Hopper: 3 stages of a 128x256x64 tile pair
# take 144 KB of the 228 KB shared memory per SM.
HOPPER_16BIT: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (64, 256, 32, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
)
# float32 operands run full-precision FMA products (no TF32): smaller tiles.
FLOAT32: tuple[tuple[int, int, int, int, int], ...] = (
    (64, 64, 32, 4, 3),
    (128, 64, 32, 4, 3),
    (64, 128, 32, 4, 3),
    (128, 128, 32, 8, 3),
)


def _fitted(shape: MatmulShape, block_m: int, block_n: int, block_k: int, warps: int, stages: int,
            smallest: int = 16) -> MatmulConfig:
    """A config with blocks no larger than the (power-of-two rounded) sizes; tl.dot needs each block >= 16."""
    def fit(block: int, size: int) -> int:
        return max(smallest, min(block, triton.next_power_of_2(max(size, 1))))

    return MatmulConfig(fit(block_m, shape.m), fit(block_n, shape.n), fit(block_k, shape.k), 8, warps, stages)


def _tiles(shape: MatmulShape, block_m: int, block_n: int) -> int:
    return triton.cdiv(shape.m, block_m) * triton.cdiv(shape.n, block_n)


def choose_matmul(shape: MatmulShape, backend: str) -> MatmulConfig:
    """The heuristic config; `backend` is "cuda" or "interpreter"."""
    if backend == "interpreter":
        # numpy runs one program at a time: modest tiles still exercise the K loop and its masks on small tests.
        return _fitted(shape, 32, 32, 32, 1, 1)
    if shape.itemsize >= 4:
        return _fitted(shape, 64, 64, 32, 4, 3)
    # The largest tile that still gives every SM a program; fewer, smaller tiles for small products.
    if _tiles(shape, 128, 256) >= SM_COUNT_H200:
        return _fitted(shape, 128, 256, 64, 8, 3)
    if _tiles(shape, 128, 128) >= SM_COUNT_H200:
        return _fitted(shape, 128, 128, 64, 4, 4)
    return _fitted(shape, 64, 128, 64, 4, 4)


def matmul_candidates(shape: MatmulShape) -> list[MatmulConfig]:
    """The configs the autotuner measures on CUDA (the heuristic's choice first)."""
    table = FLOAT32 if shape.itemsize >= 4 else HOPPER_16BIT
    found = [choose_matmul(shape, "cuda")] + [_fitted(shape, *row) for row in table]
    return list(dict.fromkeys(found))
