"""Launching a compiled kernel through its own launcher, after the first launch of a shape went through Triton's JIT.

`kernel[grid](*args)` on a `triton.jit` function binds and specialises every argument, looks the kernel up and
builds its launch metadata on every call: on the H200 host (Triton 3.6) about 28 us of Python per launch, more
than the launch itself (`benchmarks/host_overhead.py`: gpt_block's 9 launches took 0.38 ms of a 0.76 ms call).
A `DirectLaunch` keeps, per shape, the compiled kernels the JIT picked, keyed by what Triton specialises on (each
tensor's dtype and 16-byte alignment, each integer's value 1, divisibility by 16 and width), and calls the
compiled kernel's launcher itself: an argument list Triton would specialise differently misses the key and goes
through the JIT again, which compiles or finds the right kernel. Launch hooks (profilers) always take the JIT path.
Where the compiled kernel's launcher is Triton 3.6's (`CudaLauncher.__call__` of that form, checked by its code),
its C function is called directly: the Python `__call__` around it (two closures, the scratch allocators' look-ups,
~1/5 of a launch's host time in Python's profile of Llama's training step on the H100 host) is skipped for kernels
that need no scratch memory. Other Triton versions (3.9's launcher takes its arguments in another form) go through
the launcher's `__call__`.

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


# Triton 3.6's CudaLauncher.__call__, by its code's local and global names: what `_launcher` bypasses
_LAUNCHER_36 = (("self", "gridX", "gridY", "gridZ", "stream", "function", "args", "allocate_scratch",
                 "global_scratch", "profile_scratch"),
                ("global_scratch_size", "global_scratch_align", "_allocation", "_allocator", "profile_scratch_size",
                 "profile_scratch_align", "_profile_allocator", "launch", "launch_cooperative_grid", "launch_pdl"))


def _launcher(compiled: Any) -> tuple[Any, Any, tuple[Any, ...]]:
    """(launch, kernel handle, the arguments between the stream and the kernel's): the compiled kernel's C launch
    function where its launcher is Triton 3.6's and the kernel needs no scratch memory, else the launcher itself."""
    run, packed = compiled.run, compiled.packed_metadata
    call = type(run).__dict__.get("__call__")  # the launcher class's own method, not a base class's
    code = getattr(call, "__code__", None)
    if (code is not None and (code.co_varnames, code.co_names) == _LAUNCHER_36 and code.co_argcount == 6
            and not run.global_scratch_size and not run.profile_scratch_size):
        # launch(grid, stream, function, cooperative, pdl, global scratch, profile scratch, metadata, launch
        # metadata, enter hook, exit hook, *kernel arguments), as 3.6's __call__ makes the call
        return run.launch, compiled.function, (run.launch_cooperative_grid, run.launch_pdl, None, None, packed,
                                               None, None, None)
    return run, compiled.function, (packed, None, None, None)


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
            run, handle, head = launcher
            run(self.grid[0], self.grid[1], self.grid[2], self.stream(self.device), handle, *head, *args,
                *self.tail)  # type: ignore[misc]
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
            self.launchers[key] = _launcher(compiled)
