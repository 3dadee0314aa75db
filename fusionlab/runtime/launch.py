"""Kernel handles: one generated kernel, built lazily for each backend, launched with a per-shape config.

One handle serves every kind of kernel: its launch's `LaunchShape` (runtime/config.py; a matmul's in
runtime/matmul.py) chooses the config, and the config gives the grid, constexprs and launch options.

    >>> handle = KernelHandle.of(kernel, module_source, autotune=False)
    >>> handle.launch(x, out, xnumel=1024)       # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from triton.runtime.errors import OutOfResources

from fusionlab.codegen.kernel import KernelSource
from fusionlab.codegen.kinds import KernelKind
from fusionlab.runtime.config import BlockConfig, KernelShape, LaunchConfig, LaunchShape
from fusionlab.runtime.direct import DirectLaunch
from fusionlab.runtime.interpreter import build_module, interpreted_standard_library
from fusionlab.runtime.matmul import MatmulShape

# the current CUDA device's index: torch's own C function (torch.cuda.current_device wraps it in Python)
current_cuda_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


@dataclass
class KernelHandle:
    """A generated kernel: `source` is the whole module (preamble + kernel). `pin` fixes one config for every
    shape (benchmarks/matmul_epilogue.py times each candidate that way)."""

    name: str
    kind: KernelKind
    source: str
    persistent: bool = False
    heavy: int = 0
    accumulators: int = 1  # [XBLOCK, RBLOCK] tiles a looped reduction keeps live (Welford: 3)
    tile_bytes: int = 0  # bytes per element of the tiles a pipelined loop loads (KernelSource.tile_bytes)
    autotune: bool = False
    pinned: LaunchConfig | None = None
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    compiled: Any = None  # the CompiledKernel of the first CUDA launch (asm stages)
    last_config: LaunchConfig | None = None
    backends_used: set[str] = field(default_factory=set)
    tuned: dict[LaunchShape, LaunchConfig] = field(default_factory=dict)  # the CUDA config chosen per shape
    tuning: dict[LaunchShape, dict[LaunchConfig, float]] = field(default_factory=dict)  # measured ms per config
    # (xnumel, rnumel[, a matmul's K]) -> the launch on one device: launches after the first skip all choice and
    # Triton's JIT dispatch
    ready: dict[tuple[int, ...], DirectLaunch] = field(default_factory=dict)
    checks: tuple[int, ...] | None = None  # launch arguments that may specialise differently per call (all: None)

    @classmethod
    def of(cls, kernel: KernelSource, module: str, autotune: bool,
           checks: tuple[int, ...] | None = None) -> KernelHandle:
        """The launcher of one generated kernel, whose module source (preamble + kernel) is `module`; `checks`
        as the program's `launch_checks` give them."""
        return cls(kernel.name, kernel.kind, module, kernel.persistent, kernel.heavy, kernel.accumulators,
                   kernel.tile_bytes, autotune, checks=checks)

    def function(self, backend: str) -> Any:
        if backend not in self.modules:
            self.modules[backend] = build_module(self.source, self.name, interpret=backend == "interpreter")
        return self.modules[backend][self.name]

    def shape(self, args: tuple[Any, ...], xnumel: int, rnumel: int = 1) -> LaunchShape:
        """What the launch configuration is chosen from: this kernel's kind and work at these sizes."""
        if self.kind == "matmul":
            return MatmulShape.of(args, xnumel, rnumel)
        return KernelShape(self.kind, int(xnumel), int(rnumel), self.persistent, self.heavy, self.accumulators,
                           self.tile_bytes)

    def launch(self, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        key = (xnumel, rnumel, args[-1]) if self.kind == "matmul" else (xnumel, rnumel)
        fast = self.ready.get(key)
        if fast is not None and fast.device == args[0].get_device() == current_cuda_device():
            fast(args)  # the hot path: the compiled kernel's own launcher, on the current device
            return
        device = args[0].device  # the first kernel argument is always a tensor (an input or an output)
        shape = self.shape(args, xnumel, rnumel)
        if shape.empty:
            return
        backend = "cuda" if device.type == "cuda" else "interpreter"
        self.backends_used.add(backend)
        if backend == "interpreter":
            config = shape.choose(backend)
            with interpreted_standard_library():
                self._run(backend, config, shape, args)
        else:
            config = self._config(shape, args)
            with torch.cuda.device(device):
                config, compiled = self._fitting(config, shape, args)
            if self.compiled is None:
                self.compiled = compiled
            if device.index == current_cuda_device():  # launches on another device take this path
                self.ready[key] = DirectLaunch(self.function("cuda"), config.grid(shape), shape.numels,
                                               meta=config.meta(shape), checks=self.checks, device=device.index,
                                               **config.options())
        self.last_config = config

    def warm(self, *args: Any, xnumel: int, rnumel: int = 1) -> Any:
        """Compile for CUDA without running (Triton's `warmup`) with the config the real launch will use; returns
        Triton's compiled kernel."""
        shape = self.shape(args, xnumel, rnumel)
        config = self._config(shape, args)
        return self.function("cuda").warmup(*args, *shape.numels, grid=config.grid(shape), **config.options(),
                                            **config.meta(shape))

    def pin(self, config: LaunchConfig | None) -> None:
        self.pinned = config
        self.tuned.clear()
        self.ready.clear()

    def _config(self, shape: LaunchShape, args: tuple[Any, ...]) -> LaunchConfig:
        """The CUDA config, chosen once per shape: pinned, the heuristic, or the autotuner's measurement."""
        if self.pinned is not None:
            return self.pinned
        known = self.tuned.get(shape)
        if known is None:
            known = self._tune(shape, args) if self.autotune else shape.choose("cuda")
            self.tuned[shape] = known
        return known

    def _fitting(self, config: LaunchConfig, shape: LaunchShape, args: tuple[Any, ...]) -> tuple[LaunchConfig, Any]:
        """The first CUDA launch at `shape`, with `config` or, where its blocks need more shared memory or registers
        than the GPU has, the next smaller config that fits (kept for the later launches)."""
        while True:
            try:
                return config, self._run("cuda", config, shape, args)
            except OutOfResources:
                smaller = config.smaller(shape) if isinstance(config, BlockConfig) \
                    and isinstance(shape, KernelShape) else None  # (a matmul's config raises)
                if smaller is None or self.pinned is not None:
                    raise
                config = self.tuned[shape] = smaller

    def _run(self, backend: str, config: LaunchConfig, shape: LaunchShape, args: tuple[Any, ...]) -> Any:
        kernel = self.function(backend)[config.grid(shape)]
        if backend == "interpreter":
            return kernel(*args, *shape.numels, **config.meta(shape))
        return kernel(*args, *shape.numels, **config.options(), **config.meta(shape))

    def _tune(self, shape: LaunchShape, args: tuple[Any, ...]) -> LaunchConfig:
        """Time each candidate config once per shape (CUDA events, median) and keep the fastest.

        Safe to repeat: a kernel only reads its inputs and overwrites its outputs."""
        import triton.testing

        timings: dict[LaunchConfig, float] = {}
        for config in shape.candidates():
            try:
                timings[config] = float(triton.testing.do_bench(
                    lambda config=config: self._run("cuda", config, shape, args), warmup=5, rep=20,
                    return_mode="median"))
            except Exception:  # noqa: BLE001 - a config that does not compile (e.g. out of resources) is skipped
                continue
        self.tuning[shape] = timings
        return min(timings, key=timings.__getitem__) if timings else shape.choose("cuda")

    def asm(self) -> dict[str, str]:
        """Triton's compilation stages (ttir, ttgir, llir, ptx, ...) after the first CUDA launch."""
        if self.compiled is None:
            return {}
        stages = getattr(self.compiled, "asm", {}) or {}
        return {k: v if isinstance(v, str) else f"<{len(v)} bytes>" for k, v in stages.items()}
