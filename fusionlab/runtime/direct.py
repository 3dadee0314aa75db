"""Launching a compiled kernel through its own launcher, after the first launch of a shape went through Triton's JIT.

`kernel[grid](*args)` on a `triton.jit` function binds and specialises every argument, looks the kernel up and
builds its launch metadata on every call: on the H200 host (Triton 3.6) about 28 us of Python per launch, more
than the launch itself (`benchmarks/host_overhead.py`: gpt_block's 9 launches took 0.38 ms of a 0.76 ms call).
A `DirectLaunch` keeps, per shape, the compiled kernels the JIT picked, keyed by what Triton specialises on (each
tensor's dtype and 16-byte alignment, each integer's value 1, divisibility by 16 and width), and calls the
compiled kernel's launcher itself: an argument list Triton would specialise differently misses the key and goes
through the JIT again, which compiles or finds the right kernel. Launch hooks (profilers) always take the JIT path.

    >>> launch = DirectLaunch(function, grid, (xnumel,), num_warps=4, meta={"XBLOCK": 1024, "EVEN_X": True})
    >>> launch(args)             # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from triton import knobs
from triton.runtime.driver import driver

__all__ = ["DirectLaunch", "hooks_active", "specialization_key"]

_I32 = (-(2**31), 2**31)


def hooks_active() -> bool:
    """A launch hook is set (a profiler's): Triton 3.6 and 3.9 keep an always-present, usually empty, chain of
    hooks; older versions None."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return (enter is not None and bool(getattr(enter, "calls", True))) or (
        leave is not None and bool(getattr(leave, "calls", True)))


def specialization_key(args: Iterable[Any]) -> tuple[Any, ...]:
    """What Triton specialises a launch on, per argument (at least as fine as Triton's own key)."""
    key: list[Any] = []
    for value in args:
        if isinstance(value, torch.Tensor):
            key.append((value.dtype, value.data_ptr() % 16 == 0))
        elif isinstance(value, bool):
            key.append(value)
        elif isinstance(value, int):
            key.append((value == 1, value % 16 == 0, _I32[0] <= value < _I32[1]))
        else:
            key.append(type(value))
    return tuple(key)


class DirectLaunch:
    """One shape's launch of one kernel on one device: its grid, size arguments and constexprs, and the compiled
    kernels Triton chose for each argument specialisation seen so far. `checks` are the positions of the arguments
    that may specialise differently from call to call (the program's generator knows the others are the same on
    every call: buffers it allocates, sizes it writes as numbers); None checks every argument."""

    __slots__ = ("function", "grid", "numels", "num_warps", "num_stages", "meta", "tail", "launchers", "checks",
                 "device", "stream")

    def __init__(self, function: Any, grid: tuple[int, ...], numels: tuple[int, ...], *, num_warps: int,
                 meta: dict[str, Any], num_stages: int | None = None, checks: tuple[int, ...] | None = None,
                 device: int = 0) -> None:
        self.function, self.numels, self.num_warps, self.num_stages, self.meta = (function, numels, num_warps,
                                                                                  num_stages, meta)
        self.grid = (*grid, 1, 1)[:3]
        self.tail: tuple[Any, ...] | None = None  # the size arguments, then the constexprs in the kernel's order
        self.launchers: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        self.checks, self.device = checks, device
        self.stream = driver.active.get_current_stream  # resolved once: the driver's lookup costs a launch's worth

    def __call__(self, args: tuple[Any, ...]) -> None:
        checks = self.checks
        key = specialization_key(args if checks is None else [args[i] for i in checks]) if checks != () else ()
        launcher = self.launchers.get(key)
        if launcher is not None and not hooks_active():
            run, handle, packed = launcher
            run(self.grid[0], self.grid[1], self.grid[2], self.stream(self.device), handle, packed, None, None, None,
                *args, *self.tail)  # type: ignore[misc]
            return
        options: dict[str, Any] = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            options["num_stages"] = self.num_stages
        compiled = self.function[self.grid](*args, *self.numels, **options, **self.meta)
        if self.tail is None:
            names = self.function.arg_names[len(args) + len(self.numels):]
            if any(name not in self.meta for name in names):
                return  # a parameter left to its default: every launch goes through the JIT
            self.tail = (*self.numels, *(self.meta[name] for name in names))
        if compiled is not None and not hooks_active():
            self.launchers[key] = (compiled.run, compiled.function, compiled.packed_metadata)
