"""Kernel handles: one generated kernel, built lazily for each backend, launched with a per-shape config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlab.runtime.compile_pool import compile_all
from fusionlab.runtime.config import KernelShape, LaunchConfig, candidates, choose
from fusionlab.runtime.direct import DirectLaunch
from fusionlab.runtime.interpreter import build_module, interpreted_standard_library


@dataclass
class KernelHandle:
    """A generated kernel: `source` is the whole module (preamble + kernel)."""

    name: str
    kind: str
    source: str
    persistent: bool
    heavy: int = 0
    accumulators: int = 1  # [XBLOCK, RBLOCK] tiles a looped reduction keeps live (Welford: 3)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    compiled: Any = None  # the CompiledKernel of the first CUDA launch (asm stages)
    last_config: LaunchConfig | None = None
    backends_used: set[str] = field(default_factory=set)
    autotune: bool = False
    tuned: dict[KernelShape, LaunchConfig] = field(default_factory=dict)
    tuning: dict[KernelShape, dict[LaunchConfig, float]] = field(default_factory=dict)  # measured ms per config
    # (xnumel, rnumel, device index) -> the launch: launches after the first skip all choice and Triton's JIT dispatch
    ready: dict[tuple[int, int, int | None], DirectLaunch] = field(default_factory=dict)

    def function(self, backend: str) -> Any:
        if backend not in self.modules:
            self.modules[backend] = build_module(self.source, self.name, interpret=backend == "interpreter")
        return self.modules[backend][self.name]

    def launch(self, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        device = args[0].device  # the first kernel argument is always a tensor (an input or an output)
        if device.type == "cuda":
            fast = self.ready.get((xnumel, rnumel, device.index))
            if fast is not None and device.index == torch.cuda.current_device():
                fast(*args)  # the hot path: the compiled kernel's own launcher (it launches on the current device)
                return
        backend = "cuda" if device.type == "cuda" else "interpreter"
        shape = self.shape(xnumel, rnumel)
        self.backends_used.add(backend)
        if backend == "interpreter":
            config = choose(shape, backend)
            with interpreted_standard_library():
                self._run(backend, config, shape, args)
        else:
            known = self.tuned.get(shape)
            if known is None:  # chosen once per shape: the heuristic, or the autotuner's measurement
                known = self._tune(shape, args) if self.autotune else choose(shape, backend)
                self.tuned[shape] = known
            config = known
            with torch.cuda.device(device):
                compiled = self._run(backend, config, shape, args)
            if self.compiled is None:
                self.compiled = compiled
            if device.index == torch.cuda.current_device():
                numels, meta = self._meta(config, shape)
                self.ready[(xnumel, rnumel, device.index)] = DirectLaunch(
                    self.function("cuda"), config.grid(shape), numels, num_warps=config.num_warps, meta=meta)
        self.last_config = config

    def warm(self, *args: Any, xnumel: int, rnumel: int = 1) -> Any:
        """Compile for CUDA without running (Triton's `warmup`) with the config the real launch will use; returns
        Triton's compiled kernel."""
        shape = self.shape(xnumel, rnumel)
        config = self.tuned.get(shape) or choose(shape, "cuda")
        self.tuned[shape] = config
        numels, meta = self._meta(config, shape)
        return self.function("cuda").warmup(*args, *numels, grid=config.grid(shape), num_warps=config.num_warps,
                                            **meta)

    def shape(self, xnumel: int, rnumel: int = 1) -> KernelShape:
        """What the launch configuration is chosen from: this kernel's kind and work at these sizes."""
        return KernelShape(self.kind, int(xnumel), int(rnumel), self.persistent, self.heavy, self.accumulators)

    def _meta(self, config: LaunchConfig, shape: KernelShape) -> tuple[tuple[int, ...], dict[str, Any]]:
        """The size arguments and constexprs of one launch: blocks, and whether each size divides its block
        (the kernel then drops that bounds mask)."""
        # An empty size "divides" every block, but then no index is in bounds: it keeps its mask.
        meta: dict[str, Any] = {"XBLOCK": config.XBLOCK,
                                "EVEN_X": shape.xnumel > 0 and shape.xnumel % config.XBLOCK == 0}
        if self.kind == "pointwise":
            return (shape.xnumel,), meta
        meta |= {"RBLOCK": config.RBLOCK, "EVEN_R": shape.rnumel > 0 and shape.rnumel % config.RBLOCK == 0}
        return (shape.xnumel, shape.rnumel), meta

    def _run(self, backend: str, config: LaunchConfig, shape: KernelShape, args: tuple[Any, ...]) -> Any:
        numels, meta = self._meta(config, shape)
        kernel = self.function(backend)
        if backend == "interpreter":
            return kernel[config.grid(shape)](*args, *numels, **meta)
        return kernel[config.grid(shape)](*args, *numels, num_warps=config.num_warps, **meta)

    def _tune(self, shape: KernelShape, args: tuple[Any, ...]) -> LaunchConfig:
        """Time each candidate config once per shape (CUDA events, median) and keep the fastest.

        Safe to repeat: a kernel only reads its inputs and overwrites its outputs."""
        import triton.testing

        timings: dict[LaunchConfig, float] = {}
        for config in candidates(shape):
            try:
                timings[config] = float(triton.testing.do_bench(
                    lambda config=config: self._run("cuda", config, shape, args), warmup=5, rep=20,
                    return_mode="median"))
            except Exception:  # noqa: BLE001 - a config that does not compile (e.g. out of resources) is skipped
                continue
        best = min(timings, key=timings.__getitem__) if timings else choose(shape, "cuda")
        self.tuned[shape] = best
        self.tuning[shape] = timings
        return best

    def asm(self) -> dict[str, str]:
        """Triton's compilation stages (ttir, ttgir, llir, ptx, ...) after the first CUDA launch."""
        if self.compiled is None:
            return {}
        stages = getattr(self.compiled, "asm", {}) or {}
        return {k: v if isinstance(v, str) else f"<{len(v)} bytes>" for k, v in stages.items()}


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


class LaunchRecorder:
    """Stands in for `launch` in a dry run of the program: records each launch instead of running it."""

    def __init__(self) -> None:
        self.records: list[tuple[KernelHandle, tuple[Any, ...], int, int]] = []

    def __call__(self, handle: KernelHandle, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        self.records.append((handle, args, int(xnumel), int(rnumel)))


def compile_in_parallel(records: list[tuple[KernelHandle, tuple[Any, ...], int, int]],
                        workers: str = "processes") -> None:
    """Compile every recorded CUDA kernel at once, so the first call does not pay one compile after another:
    in forked worker processes that fill Triton's cache (see compile_pool), or in threads (`workers="threads"`)."""
    unique = list({id(r[0]): r for r in records}.values())
    for handle, *_ in unique:
        handle.function("cuda")  # build the modules one by one: that step toggles the interpreter switch
    compile_all(unique, workers)
