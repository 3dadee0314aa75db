"""Compiling for a GPU that is not here: Triton compiles for a given target without a device, once its driver
question ("which device, which stream, which target?") gets an answer. Used to check that every kernel compiles for
the H200 on CPU-only machines, and to read a kernel's SASS there (benchmarks/sass_count.py).

    >>> with stand_in_gpu():                                   # doctest: +SKIP
    ...     kernel.warmup(*args, grid=(1,), XBLOCK=64)        # compiled for sm_90, never launched
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

__all__ = ["H200_TARGET", "StandInDriver", "stand_in_gpu"]

H200_TARGET = GPUTarget("cuda", 90, 32)


class StandInDriver:
    """Answers Triton's questions about the current device as an H200 would; runs nothing."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return H200_TARGET


@contextlib.contextmanager
def stand_in_gpu() -> Iterator[StandInDriver]:
    """Triton's active driver is a StandInDriver inside the block, and what it was before after it."""
    previous = driver._active
    stand_in = StandInDriver()
    driver.set_active(stand_in)
    try:
        yield stand_in
    finally:
        driver._active = previous
