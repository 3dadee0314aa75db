"""Kernel handles: one generated kernel, built lazily for each backend, launched with a per-shape config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fusionlab.runtime.config import KernelShape, LaunchConfig, choose
from fusionlab.runtime.interpreter import build_module, interpreted_standard_library


@dataclass
class KernelHandle:
    """A generated kernel: `source` is the whole module (preamble + kernel)."""

    name: str
    kind: str
    source: str
    persistent: bool
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    compiled: Any = None  # the CompiledKernel of the first CUDA launch (asm stages)
    last_config: LaunchConfig | None = None
    backends_used: set[str] = field(default_factory=set)

    def function(self, backend: str) -> Any:
        if backend not in self.modules:
            self.modules[backend] = build_module(self.source, self.name, interpret=backend == "interpreter")
        return self.modules[backend][self.name]

    def launch(self, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        backend = "cuda" if device.type == "cuda" else "interpreter"
        shape = KernelShape(self.kind, int(xnumel), int(rnumel), self.persistent)
        config = choose(shape, backend)
        self.last_config = config
        self.backends_used.add(backend)
        kernel = self.function(backend)
        meta: dict[str, Any] = {"XBLOCK": config.XBLOCK}
        if self.kind == "reduction":
            meta["RBLOCK"] = config.RBLOCK
        numels = (int(xnumel), int(rnumel)) if self.kind == "reduction" else (int(xnumel),)
        if backend == "interpreter":
            with interpreted_standard_library():
                kernel[config.grid(shape)](*args, *numels, **meta)
        else:
            with torch.cuda.device(device):
                compiled = kernel[config.grid(shape)](*args, *numels, num_warps=config.num_warps, **meta)
            if self.compiled is None:
                self.compiled = compiled

    def asm(self) -> dict[str, str]:
        """Triton's compilation stages (ttir, ttgir, llir, ptx, ...) after the first CUDA launch."""
        if self.compiled is None:
            return {}
        stages = getattr(self.compiled, "asm", {}) or {}
        return {k: v if isinstance(v, str) else f"<{len(v)} bytes>" for k, v in stages.items()}


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)
