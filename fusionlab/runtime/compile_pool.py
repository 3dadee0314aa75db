"""Compiling a program's kernels at once, before its first CUDA call: in forked worker processes, or in threads.

Triton's compiler holds the GIL for much of its work (the AST walk to TTIR, the Python glue between MLIR passes),
so compiler threads convoy on it; on a 2-core machine a busy Python thread made one compiling thread 4x slower.
Worker processes avoid that, as Inductor's do. A worker compiles a whole kernel with `triton.compile` into
Triton's on-disk cache; the parent's launch then finds it there (the same source, specialization, options and
target give the same cache key), so the parent never compiles it again.

    >>> compile_all(jobs, workers="processes")   # jobs: (handle, launch arguments, xnumel, rnumel)

The workers are forked for each call and exit after it: they see the parent's environment and Triton settings as
they are now (a cold `TRITON_CACHE_DIR` in a benchmark stays cold), share its imported modules (nothing to import)
and never touch CUDA (`triton.compile` is given the target; it needs no driver).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch
import triton
from triton import knobs
from triton.compiler import ASTSource
from triton.runtime.cache import triton_key
from triton.runtime.driver import driver
from triton.runtime.errors import OutOfResources

__all__ = ["CompileJob", "CompileStalled", "KernelCompileError", "WORKER_KINDS", "compile_all", "compile_job",
           "job_for", "processes_available", "stall_seconds"]

WORKER_KINDS = ("processes", "threads")


class Warmable(Protocol):
    """A kernel handle: its name, and `warm` compiles it for CUDA with the config its real launch will use."""

    name: str

    def warm(self, *args: Any, xnumel: int, rnumel: int = 1) -> Any: ...


Launch = tuple[Any, tuple[Any, ...], int, int]  # (handle, kernel arguments, xnumel, rnumel), as LaunchRecorder keeps


class KernelCompileError(RuntimeError):
    """A kernel that Triton failed to compile in a worker; the message names the kernel and the error."""


class CompileStalled(KernelCompileError):
    """No kernel finished compiling for `stall_seconds()`: compiling the stuck ones at their first launch instead
    would hang the caller, so this is raised, naming them."""


def stall_seconds() -> float:
    """How long the workers may go without finishing any kernel (FUSIONLAB_COMPILE_STALL_S, default 300 s; the
    slowest kernel of the zoo compiled in 6.4 s on the H200 host)."""
    return float(os.environ.get("FUSIONLAB_COMPILE_STALL_S", "300"))


@dataclass(frozen=True)
class CompileJob:
    """One `triton.compile` call, exactly as the parent's launch would make it (Triton's specialization of the
    launch: signature, constants, attributes, options; and the device's target)."""

    name: str
    function: Any  # the JITFunction (inherited by forked workers: never pickled)
    signature: dict[str, Any]
    constants: dict[Any, Any]
    attributes: dict[Any, Any]
    options: dict[str, Any]
    target: Any


def job_for(handle: Warmable, launch: Launch) -> CompileJob | None:
    """Triton's compile call for one launch, without compiling: `warm` runs with Triton's `jit_cache_hook` saying
    "skip". None when Triton already holds the kernel in memory (nothing to compile)."""
    seen: list[dict[str, Any]] = []

    def skip(**call: Any) -> bool:
        seen.append(call)
        return True

    previous = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = skip
    try:
        handle.warm(*launch[1], xnumel=launch[2], rnumel=launch[3])
    finally:
        knobs.runtime.jit_cache_hook = previous
    if not seen:
        return None
    call = seen[0]["compile"]
    # The options travel as Triton's own `preload` reads them back (JSON lists become tuples).
    options = json.loads(call["specialization_data"])["options"]
    return CompileJob(handle.name, seen[0]["fn"].jit_function, dict(call["signature"]), dict(call["constants"]),
                      dict(call["configs"][0]), {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()},
                      driver.active.get_current_target())


def compile_job(job: CompileJob) -> str:
    """Compile one kernel into Triton's on-disk cache; returns the kernel's cache hash."""
    try:
        kernel = triton.compile(ASTSource(job.function, job.signature, job.constants, job.attributes),
                                target=job.target, options=job.options)
    except Exception as error:  # noqa: BLE001 - re-raised with the kernel's name; it must pickle back to the parent
        raise KernelCompileError(f"Triton could not compile kernel {job.name}: {type(error).__name__}: "
                                 f"{error}") from None
    return str(kernel.hash)


def processes_available() -> bool:
    """Forked workers are possible: the platform has fork, and this is not a daemonic process (which may not
    have children, e.g. a DataLoader worker)."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


_JOBS: list[CompileJob] = []  # read by forked workers: set just before the fork, cleared after
_FORK_LOCK = threading.Lock()


def _compile_inherited(index: int) -> str:
    return compile_job(_JOBS[index])


def compile_all(launches: Sequence[Launch], workers: str = "processes") -> None:
    """Compile the kernels of `launches` (one per handle) at once, so the first call does not pay one compile
    after another. `workers`: "processes" (forked; threads where fork is unavailable) or "threads"."""
    if workers not in WORKER_KINDS:
        raise ValueError(f"workers must be one of {WORKER_KINDS}, got {workers!r}")
    unique = list({id(launch[0]): launch for launch in launches}.values())
    if not unique:
        return
    # Triton hashes its own 500 MB library for the cache key once per process; done here, it is done once (not
    # by every thread at the same time) and forked workers inherit it.
    triton_key()
    count = min(len(unique), _cpus())
    jobs = [job_for(launch[0], launch) for launch in unique]
    with ThreadPoolExecutor(max_workers=4) as launchers:

        def build_launchers() -> None:  # while the kernels compile
            for job in _distinct_signatures(jobs, unique[0][1]):
                launchers.submit(_build_launcher, job)

        if workers == "processes" and count > 1 and processes_available():
            kernels = _compile_in_processes(unique, jobs, count, build_launchers)
        else:
            build_launchers()
            kernels = _compile_in_threads(unique, max(1, min(8, len(unique))))
    _load_in_threads(kernels, unique[0][1])


# What Triton's launcher reads from a compiled kernel's metadata, for a kernel with no scratch memory, no tensor
# descriptors, one CTA and no instrumentation: the launcher's source depends on the kernel's signature only.
_PLAIN_METADATA = SimpleNamespace(
    num_ctas=1, tensordesc_meta=None, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
    profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=False, instrumentation_mode="",
)


def _device_of(args: tuple[Any, ...]) -> Any:
    return next((a.device for a in args if hasattr(a, "device")), None)


def _on_cuda(args: tuple[Any, ...]) -> bool:
    device = _device_of(args)
    return device is not None and device.type == "cuda"


def _distinct_signatures(jobs: Sequence[CompileJob | None], args: tuple[Any, ...]) -> list[CompileJob]:
    """One job per kernel signature, on CUDA only (elsewhere Triton builds no launcher)."""
    if not _on_cuda(args):
        return []
    distinct: dict[str, CompileJob] = {}
    for job in jobs:
        if job is not None:
            distinct.setdefault(repr((sorted(job.signature.items()), sorted(job.constants.items(), key=repr))), job)
    return list(distinct.values())


def _build_launcher(job: CompileJob) -> None:
    """Build the launcher for the job's signature now, while the kernel compiles, so its first launch finds it in
    Triton's cache. Triton 3.6 builds one per signature with the C compiler (~0.2 s, a subprocess: it overlaps the
    compile); Triton 3.9 has one launcher for every kernel, and this only loads it early. An optimisation only:
    if it fails here, the kernel's first launch builds it as before."""
    try:
        driver.active.launcher_cls(ASTSource(job.function, job.signature, job.constants, job.attributes),
                                   _PLAIN_METADATA)
    except Exception:  # noqa: BLE001, S110 - the launch builds it again and reports any real error there
        pass


def _load_in_threads(kernels: list[Any], args: tuple[Any, ...]) -> None:
    """Load each compiled kernel and its launcher before the first call, in threads: Triton would otherwise do it
    at each kernel's first launch, one after another (gpt_block's first call after its kernels were compiled took
    1.6 s on the H200 host). A launcher `_build_launcher` did not build is built here, by the C compiler in a
    subprocess, so the threads overlap."""
    device = _device_of(args)
    loadable = [k for k in kernels if hasattr(k, "_init_handles")]
    if not _on_cuda(args) or not loadable:
        return

    def load(kernel: Any) -> None:
        with torch.cuda.device(device):  # the current device is per thread
            try:
                kernel._init_handles()
            except OutOfResources:
                pass  # its blocks need more shared memory (or threads) than the GPU has: its first launch steps down

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(loadable)))) as pool:
        list(pool.map(load, loadable))


def _warm(launch: Launch) -> Any:
    return launch[0].warm(*launch[1], xnumel=launch[2], rnumel=launch[3])


def _compile_in_threads(unique: list[Launch], count: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [(launch, pool.submit(_warm, launch)) for launch in unique]
    kernels = []
    for launch, future in futures:
        if future.exception() is not None:
            # Concurrent ast.parse can fail spuriously ("AST constructor recursion depth mismatch", CPython
            # 3.11.7): compile that kernel again, alone; a real error then raises from here.
            kernels.append(_warm(launch))
        else:
            kernels.append(future.result())
    return kernels


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the workers now: the pool's own shutdown would wait for a compile that does not end."""
    for process in list(getattr(pool, "_processes", {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _compile_in_processes(unique: list[Launch], jobs: list[CompileJob | None], count: int,
                          forked: Callable[[], None]) -> list[Any]:
    """Compile in forked workers; `forked` runs once every worker is forked (it may start threads: a fork copies
    only the thread that forks, so threads started before it could leave a worker a lock nobody releases)."""
    todo = [(launch, job) for launch, job in zip(unique, jobs) if job is not None]  # None: Triton holds it
    kernels = [_warm(launch) for launch, job in zip(unique, jobs) if job is None]
    if not todo:
        forked()
        return kernels
    with _FORK_LOCK:
        _JOBS[:] = [job for _, job in todo]
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns on fork in a threaded process; the workers only run Triton's compiler.
                warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
                with ProcessPoolExecutor(max_workers=min(count, len(todo)),
                                         mp_context=multiprocessing.get_context("fork")) as pool:
                    futures = {pool.submit(_compile_inherited, i): launch for i, (launch, _) in enumerate(todo)}
                    forked()  # with the fork start method the pool forks all its workers at the first submit
                    waiting = dict(futures)
                    try:
                        # As each worker finishes, the parent loads that kernel from the cache while others compile.
                        while waiting:
                            done, _ = wait(waiting, timeout=stall_seconds(), return_when=FIRST_COMPLETED)
                            if not done:
                                _stop(pool)
                                names = ", ".join(launch[0].name for launch in waiting.values())
                                raise CompileStalled(
                                    f"Triton finished compiling none of {names} in {stall_seconds():.0f} s "
                                    f"(FUSIONLAB_COMPILE_STALL_S). A kernel this slow to compile is a fusion too "
                                    "large for Triton's compiler: please report it with the kernel's source (the "
                                    "exploration's `generated`). Meanwhile keep its ops apart "
                                    "(`ex.with_fusion(forbid=[(producer, consumer)])`, names from "
                                    "`ex.fused.decisions`), or run that function eagerly")
                            for future in done:
                                future.result()
                                kernels.append(_warm(waiting.pop(future)))
                    except BrokenProcessPool:
                        names = ", ".join(launch[0].name for launch in waiting.values())
                        raise KernelCompileError(f"a compile worker died while compiling {names}") from None
        finally:
            _JOBS.clear()
    return kernels
