"""The generated program made runnable: a handle per kernel, the wrapper function whose `launch` calls them, and
the same wrapper with its launches recorded instead of run.

Before its first CUDA call on a device, a dry run lists the launches and every kernel compiles at once
(runtime/compile_pool.py).

    >>> runnable = Runnable(generated.program, autotune=False)
    >>> outputs = runnable(x, b)
    >>> [record.handle.name for record in runnable.record_launches(x, b)]
    ['pointwise_0_add_mul_erf']
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from fusionlab.codegen.preamble import KERNEL_PREAMBLE
from fusionlab.codegen.program import Program
from fusionlab.runtime.compile_pool import CompileStalled, compile_all
from fusionlab.runtime.interpreter import triton
from fusionlab.runtime.launch import KernelHandle, current_cuda_device


def _as_strided(base: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    return base.as_strided(size, stride, base.storage_offset() + offset)


_GUARDS = getattr(getattr(torch._C, "_dynamo", None), "guards", None)  # torch's C helpers for Inductor's wrapper
# A view of `base` with these sizes and strides, `offset` elements past base's own offset, made in one step: torch's
# C function for it (it makes no autograd view: programs run without grad), else as_strided
reinterpret = getattr(_GUARDS, "_reinterpret_tensor", _as_strided)
_EMPTY_CUDA = getattr(_GUARDS, "_empty_strided_cuda", None)
_EMPTY_CPU = getattr(_GUARDS, "_empty_strided_cpu", None)


def allocator(device: torch.device) -> Callable[[tuple[int, ...], tuple[int, ...], torch.dtype], torch.Tensor]:
    """The program's `empty(sizes, strides, dtype)` on `device`, chosen once per call: torch's C allocation functions
    (Inductor's wrapper uses them; the CUDA one allocates on the current device), else torch.empty_strided."""
    if device.type == "cuda" and _EMPTY_CUDA is not None and device.index == current_cuda_device():
        return _EMPTY_CUDA  # type: ignore[no-any-return]
    if device.type == "cpu" and _EMPTY_CPU is not None:
        return _EMPTY_CPU  # type: ignore[no-any-return]
    return functools.partial(_empty_strided, device=device)


def _empty_strided(sizes: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    return torch.empty_strided(sizes, strides, dtype=dtype, device=device)


class LaunchRecord(NamedTuple):
    """One launch of the program, as it would have been made."""

    handle: KernelHandle
    args: tuple[Any, ...]
    xnumel: int
    rnumel: int


class Runnable:
    """The program's handles and wrapper; `compile_workers` is how the kernels compile at once before the first
    CUDA call ("processes" or "threads")."""

    def __init__(self, program: Program, autotune: bool, compile_workers: str = "processes") -> None:
        self.handles = tuple(KernelHandle.of(k, KERNEL_PREAMBLE + "\n\n" + k.source, autotune,
                                             program.launch_checks.get(k.name))
                             for k in program.kernels)
        self.input_dtypes = program.input_dtypes
        self.compile_workers = compile_workers
        self._records: list[LaunchRecord] = []
        self._prepared: set[torch.device] = set()
        namespace: dict[str, Any] = {"torch": torch, "triton": triton, "allocator": allocator,
                                     "reinterpret": reinterpret, "launch": KernelHandle.launch,
                                     **program.namespace_constants, **{h.name: h for h in self.handles}}
        code = compile(program.wrapper, "<fusionlab program>", "exec")
        exec(code, namespace)  # noqa: S102 - our own generated source
        self.function = namespace["fusionlab_program"]
        dry = dict(namespace, launch=self._record)
        exec(code, dry)  # noqa: S102 - the same program, launches recorded (compiled in parallel on first use)
        self._dry_run = dry["fusionlab_program"]

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.input_dtypes and _dtypes(tensors) != self.input_dtypes:
            # the launches after a call's first reuse what Triton compiled for these dtypes
            raise TypeError(_wrong_dtypes(self.input_dtypes, tensors))
        self.prepare(*tensors)
        return self.function(*tensors)  # type: ignore[no-any-return]

    def record_launches(self, *tensors: torch.Tensor) -> list[LaunchRecord]:
        """The launches a call would make, in order, recorded instead of run (extern ops do run)."""
        self._records = []
        try:
            self._dry_run(*tensors)
            return self._records
        finally:
            self._records = []  # not kept: they hold the call's tensors (a training step's activations)

    def _record(self, handle: KernelHandle, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        self._records.append(LaunchRecord(handle, args, int(xnumel), int(rnumel)))

    def prepare(self, *tensors: torch.Tensor) -> None:
        """Before the first CUDA call on a device: a dry run lists the launches, then all kernels compile at once."""
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), None)
        if device is None or device.type != "cuda" or device in self._prepared:
            return
        self._prepared.add(device)
        if any(h.autotune for h in self.handles):
            return  # the autotuner compiles its candidates itself
        try:
            compile_in_parallel(self.record_launches(*tensors), self.compile_workers)
        except CompileStalled:
            raise  # compiling the stuck kernel at its first launch would hang the caller instead
        except Exception as error:  # noqa: BLE001 - an optimisation only: kernels then compile at first launch
            warnings.warn(f"compiling the kernels in parallel failed ({type(error).__name__}: {error}); they "
                          "compile one by one at their first launch instead", RuntimeWarning, stacklevel=2)


def _dtypes(tensors: tuple[Any, ...]) -> tuple[torch.dtype | None, ...]:
    try:
        return tuple(map(_DTYPE, tensors))  # no Python frame per input (a model's hundreds of parameters)
    except AttributeError:
        return tuple(map(_dtype, tensors))


_DTYPE = operator.attrgetter("dtype")


def _dtype(value: Any) -> torch.dtype | None:
    return value.dtype if isinstance(value, torch.Tensor) else None


def _wrong_dtypes(expected: tuple[torch.dtype | None, ...], tensors: tuple[Any, ...]) -> str:
    if len(expected) != len(tensors):
        return f"the program takes {len(expected)} inputs, got {len(tensors)}"
    wrong = [f"input {i}: {_dtype(t)} (generated for {want})" for i, (want, t) in enumerate(zip(expected, tensors))
             if _dtype(t) != want]
    return (f"the program was generated for other dtypes: {'; '.join(wrong)}. Explore the function again with "
            "inputs of these dtypes (fl.explore), or call it through its Exploration, which checks them")


def compile_in_parallel(records: list[LaunchRecord], workers: str = "processes") -> None:
    """Compile every recorded CUDA kernel at once, so the first call does not pay one compile after another:
    in forked worker processes that fill Triton's cache (see compile_pool), or in threads (`workers="threads"`)."""
    unique = list({id(r[0]): r for r in records}.values())
    for handle, *_ in unique:
        handle.function("cuda")  # build the modules one by one: that step toggles the interpreter switch
    compile_all(unique, workers)
