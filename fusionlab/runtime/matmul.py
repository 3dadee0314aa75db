"""Launching generated matmul kernels: tile configs chosen per shape (M, N, K) at run time, and their handle.

A matmul kernel takes BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M and EVEN_K as constexprs, and warps and pipeline stages
as launch options; none of them is in its source. `choose_matmul` is the heuristic, `matmul_candidates` the small
space the autotuner (`autotune=True`) measures, sized for Hopper (H100/H200) with 16-bit operands.

    >>> choose_matmul(MatmulShape(8192, 16384, 4096, 2), "cuda")
    MatmulConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import triton

from fusionlab.codegen.kernel import KernelSource
from fusionlab.runtime.direct import DirectLaunch
from fusionlab.runtime.interpreter import interpreted_standard_library
from fusionlab.runtime.launch import KernelHandle

SM_COUNT_H200 = 132  # programs that run at once, one per SM, on an H100/H200


@dataclass(frozen=True)
class MatmulShape:
    """The product's sizes ([M, K] @ [K, N]) and its operands' bytes per element."""

    m: int
    n: int
    k: int
    itemsize: int = 2


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


@dataclass
class MatmulHandle(KernelHandle):
    """A generated matmul kernel. Its last positional argument is K (the launcher reads it for EVEN_K); `pin`
    fixes one config for every shape (used by benchmarks/matmul_epilogue.py to time each candidate)."""

    last_config: Any = None
    pinned: MatmulConfig | None = None
    chosen: dict[MatmulShape, MatmulConfig] = field(default_factory=dict)
    tuning: dict[Any, dict[Any, float]] = field(default_factory=dict)  # MatmulShape -> MatmulConfig -> ms
    # (M, N, K, device index) -> the launch: launches after the first skip all choice and Triton's JIT dispatch
    fast: dict[tuple[int, int, int, int | None], DirectLaunch] = field(default_factory=dict)

    def pin(self, config: MatmulConfig | None) -> None:
        self.pinned = config
        self.chosen.clear()
        self.fast.clear()

    def _shape(self, args: tuple[Any, ...], xnumel: int, rnumel: int) -> MatmulShape:
        return MatmulShape(int(xnumel), int(rnumel), int(args[-1]), args[0].element_size())

    def launch(self, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        if xnumel == 0 or rnumel == 0:
            return  # an empty product: nothing to write (and `% size` in the kernel would divide by zero)
        device = args[0].device  # the first argument is the left operand
        if device.type == "cuda":
            fast = self.fast.get((xnumel, rnumel, int(args[-1]), device.index))
            if fast is not None and device.index == torch.cuda.current_device():
                fast(*args)  # the compiled kernel's own launcher (see runtime/direct.py)
                return
        shape = self._shape(args, xnumel, rnumel)
        backend = "cuda" if device.type == "cuda" else "interpreter"
        self.backends_used.add(backend)
        if backend == "interpreter":
            config = choose_matmul(shape, backend)
            with interpreted_standard_library():
                self.function(backend)[config.grid(shape)](*args, xnumel, rnumel, **config.meta(shape))
        else:
            config = self._config(shape, args)
            with torch.cuda.device(device):
                compiled = self._run(config, shape, args)
            if self.compiled is None:
                self.compiled = compiled
            if device.index == torch.cuda.current_device():
                self.fast[(xnumel, rnumel, shape.k, device.index)] = DirectLaunch(
                    self.function("cuda"), config.grid(shape), (xnumel, rnumel), num_warps=config.num_warps,
                    num_stages=config.num_stages, meta=config.meta(shape))
        self.last_config = config

    def _config(self, shape: MatmulShape, args: tuple[Any, ...]) -> MatmulConfig:
        if self.pinned is not None:
            return self.pinned
        known = self.chosen.get(shape)
        if known is None:  # chosen once per shape: the heuristic, or the autotuner's measurement
            known = self._tune_matmul(shape, args) if self.autotune else choose_matmul(shape, "cuda")
            self.chosen[shape] = known
        return known

    def _run(self, config: MatmulConfig, shape: MatmulShape, args: tuple[Any, ...]) -> Any:  # type: ignore[override]
        return self.function("cuda")[config.grid(shape)](*args, shape.m, shape.n, num_warps=config.num_warps,
                                                         num_stages=config.num_stages, **config.meta(shape))

    def warm(self, *args: Any, xnumel: int, rnumel: int = 1) -> Any:
        """Compile for CUDA without running, with the config the real launch will use; returns the compiled kernel."""
        shape = self._shape(args, xnumel, rnumel)
        config = self._config(shape, args)
        return self.function("cuda").warmup(*args, shape.m, shape.n, grid=config.grid(shape),
                                            num_warps=config.num_warps, num_stages=config.num_stages,
                                            **config.meta(shape))

    def _tune_matmul(self, shape: MatmulShape, args: tuple[Any, ...]) -> MatmulConfig:
        """Time each candidate (CUDA events, median) and keep the fastest; a kernel only overwrites its outputs."""
        import triton.testing

        timings: dict[MatmulConfig, float] = {}
        for config in matmul_candidates(shape):
            try:
                timings[config] = float(triton.testing.do_bench(
                    lambda config=config: self._run(config, shape, args), warmup=5, rep=20, return_mode="median"))
            except Exception:  # noqa: BLE001 - a config that does not compile (out of shared memory) is skipped
                continue
        best = min(timings, key=timings.__getitem__) if timings else choose_matmul(shape, "cuda")
        self.tuning[shape] = timings
        return best


def handle_for(kernel: KernelSource, module: str, autotune: bool) -> KernelHandle:
    """The launcher of one generated kernel: a matmul handle for matmul kernels, else the general one."""
    if kernel.kind == "matmul":
        return MatmulHandle(kernel.name, kernel.kind, module, False, heavy=kernel.heavy, autotune=autotune)
    return KernelHandle(kernel.name, kernel.kind, module, kernel.persistent, heavy=kernel.heavy,
                        accumulators=kernel.accumulators, autotune=autotune)
