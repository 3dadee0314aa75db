"""Compiling a program's kernels at once before the first CUDA call: forked workers fill Triton's on-disk cache,
and the parent then loads each kernel from there instead of compiling it again.

No GPU is needed: a stand-in Triton driver answers "an sm_90 device" (Triton compiles for it without one), and
the kernels are only compiled, never launched.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
from triton.compiler import ASTSource
from triton.runtime.driver import driver

import fusionlab as fl
import fusionlab.runtime.compile_pool as compile_pool
from fusionlab.runtime.compile_pool import KernelCompileError, compile_all
from fusionlab.runtime.interpreter import build_module
from fusionlab.runtime.runnable import compile_in_parallel
from fusionlab.runtime.targets import H200_TARGET, stand_in_gpu


@pytest.fixture
def sm90(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An sm_90 target, an empty Triton cache folder (returned), and at least two CPUs as far as the pool knows."""
    cache = tmp_path / "triton-cache"
    cache.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setattr(compile_pool, "_cpus", lambda: 4)
    with stand_in_gpu():
        yield cache


@contextlib.contextmanager
def compiles_in_this_process() -> Iterator[list[str]]:
    """The kernels this process (not a forked worker) lowers from Python: a cache hit lowers nothing."""
    parent = os.getpid()
    lowered: list[str] = []
    original = ASTSource.make_ir

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        if os.getpid() == parent:
            lowered.append(self.fn.__name__)
        return original(self, *args, **kwargs)

    ASTSource.make_ir = counting  # type: ignore[method-assign]
    try:
        yield lowered
    finally:
        ASTSource.make_ir = original  # type: ignore[method-assign]


def recorded_launches(ex: fl.Exploration, *inputs: torch.Tensor) -> list[Any]:
    return list(ex.compiled.record_launches(*inputs))


def gpt_like_program() -> tuple[fl.Exploration, tuple[torch.Tensor, ...]]:
    """Kernels on both sides of a matmul (layer norm and softmax; gelu and the residual add)."""
    def block(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        normed = torch.nn.functional.layer_norm(x, (x.shape[-1],), weight)
        mixed = torch.softmax(normed, -1) @ weight.diag()
        return x + torch.nn.functional.gelu(mixed)

    inputs = (torch.randn(8, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16))
    return fl.explore(block, *inputs), inputs


def cache_entries(cache: Path) -> int:
    return sum(1 for entry in cache.iterdir() if entry.is_dir())


@pytest.mark.parametrize("workers", ["processes", "threads"])
def test_the_parent_loads_what_the_workers_compiled(sm90: Path, workers: str) -> None:
    ex, inputs = gpt_like_program()
    launches = recorded_launches(ex, *inputs)
    kernels = {id(launch[0]) for launch in launches}
    assert len(kernels) >= 2, ex.fused
    with compiles_in_this_process() as lowered:
        compile_in_parallel(launches, workers)
    if workers == "processes":
        assert lowered == [], "the parent compiled kernels the workers had put in the cache"
    else:  # the counter sees compiles in this process
        assert len(set(lowered)) == len(kernels)
    assert cache_entries(sm90) == len(kernels), "each kernel compiled once, under one cache key"
    # The first real launch finds every kernel compiled (in memory, or in the cache): it compiles nothing more.
    with compiles_in_this_process() as lowered:
        for handle, args, xnumel, rnumel in launches:
            handle.warm(*args, xnumel=xnumel, rnumel=rnumel)
    assert lowered == []


def test_a_workers_compile_call_is_the_launchs_own(sm90: Path) -> None:
    """The job a worker runs gives the same cache key as the launch's compile: the launch then compiles nothing."""
    ex, inputs = gpt_like_program()
    for launch in recorded_launches(ex, *inputs):
        handle = launch[0]
        handle.function("cuda")
        job = compile_pool.job_for(handle, launch)
        assert job is not None and job.name == handle.name and job.target == H200_TARGET
        compile_pool.compile_job(job)  # here, not in a worker: the check is about the key
        with compiles_in_this_process() as lowered:
            handle.warm(*launch[1], xnumel=launch[2], rnumel=launch[3])
        assert lowered == [], handle.name


BROKEN_KERNEL = '''
import triton
import triton.language as tl

@triton.jit
def broken_kernel(x_ptr, xnumel, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + undefined_name, mask=offsets < xnumel)
'''


class BrokenHandle:
    """A handle whose kernel passes Triton's specialization but fails to compile."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.function = build_module(BROKEN_KERNEL, name, interpret=False)["broken_kernel"]

    def warm(self, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        self.function.warmup(*args, xnumel, grid=(1,), XBLOCK=64)


def test_a_failed_compile_names_its_kernel(sm90: Path) -> None:
    ex, inputs = gpt_like_program()
    launches = recorded_launches(ex, *inputs)
    broken = BrokenHandle("pointwise_7_broken")
    with pytest.raises(KernelCompileError, match="(?s)kernel pointwise_7_broken.*undefined_name"):
        compile_all([*launches, (broken, (torch.empty(64),), 64, 1)], "processes")


def test_a_compile_that_never_ends_is_named_not_waited_for(sm90: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel Triton does not finish compiling (BERT's 48 sibling sums once did) raises CompileStalled naming it
    once no kernel has finished for FUSIONLAB_COMPILE_STALL_S, its worker ended, instead of hanging the caller."""
    import multiprocessing
    import time

    ex, inputs = gpt_like_program()
    launches = recorded_launches(ex, *inputs)
    stuck = launches[-1][0].name
    original = compile_pool.compile_job

    def slow(job: compile_pool.CompileJob) -> str:
        if job.name == stuck:
            time.sleep(120)
        return original(job)

    monkeypatch.setattr(compile_pool, "compile_job", slow)
    monkeypatch.setenv("FUSIONLAB_COMPILE_STALL_S", "3")
    start = time.perf_counter()
    with pytest.raises(compile_pool.CompileStalled, match=f"none of {stuck} in 3 s"):
        compile_all(launches, "processes")
    assert time.perf_counter() - start < 60
    time.sleep(0.5)
    assert not multiprocessing.active_children()


def test_without_fork_the_kernels_compile_in_threads(sm90: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_pool, "processes_available", lambda: False)
    ex, inputs = gpt_like_program()
    launches = recorded_launches(ex, *inputs)
    with compiles_in_this_process() as lowered:
        compile_in_parallel(launches, "processes")
    assert len(set(lowered)) == len({id(launch[0]) for launch in launches})


def test_workers_must_be_processes_or_threads() -> None:
    with pytest.raises(ValueError, match="workers must be one of"):
        compile_all([], "fibers")


def test_triton_compile_needs_no_driver_in_a_worker(sm90: Path) -> None:
    """What a forked worker runs: `triton.compile` with an explicit target asks the driver nothing."""
    driver.set_active(object())  # any question to the driver would fail
    source = build_module(BROKEN_KERNEL.replace(" + undefined_name", ""), "plain", interpret=False)["broken_kernel"]
    kernel = triton.compile(ASTSource(source, {"x_ptr": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
                                      {(2,): 64}), target=H200_TARGET)
    assert "ptx" in kernel.asm


def launcher_libraries(cache: Path) -> set[str]:
    return {path.parent.name for path in cache.glob("*/__triton_launcher*.so")}


@pytest.mark.gpu
def test_each_launcher_is_built_once_while_the_kernels_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher built from a compile job's signature is the one the kernel's first launch uses. Triton 3.6
    builds one per signature (a second build would be a second cache entry); Triton 3.9 builds none at all."""
    cache = tmp_path / "triton-cache"
    cache.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    ex, cpu_inputs = gpt_like_program()
    inputs = tuple(t.cuda() for t in cpu_inputs)
    ex = fl.explore(ex.fn, *inputs)
    launches = recorded_launches(ex, *inputs)
    jobs = [compile_pool.job_for(launch[0], launch) for launch in launches]
    for job in compile_pool._distinct_signatures(jobs, launches[0][1]):
        compile_pool._build_launcher(job)
    built = launcher_libraries(cache)
    per_signature = "compile_module_from_src" in inspect.getsource(driver.active.launcher_cls)
    assert (1 <= len(built) <= len(jobs)) if per_signature else not built, built
    torch.testing.assert_close(ex(*inputs), ex.fn(*inputs), atol=2e-2, rtol=2e-2)
    assert launcher_libraries(cache) == built, "a kernel's first launch built a launcher that was already built"


def test_recorded_launches_do_not_keep_the_calls_tensors() -> None:
    """The dry run before the first CUDA call records every launch with its arguments: the program keeps none of
    them afterwards (a backward graph's first call would keep a training step's activations alive)."""
    import gc
    import weakref

    x = torch.randn(64, 256)
    ex = fl.explore(lambda t: torch.softmax(t * 2, -1), x)
    fresh = torch.randn(64, 256)
    records = ex.compiled.record_launches(fresh)
    assert records and any(arg is fresh for record in records for arg in record.args)
    alive = weakref.ref(fresh)
    del records, fresh
    gc.collect()
    assert alive() is None, "the program kept the recorded call's input"


def test_a_kernel_too_large_for_shared_memory_does_not_stop_the_others_loading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the compiled kernels before the first call: one whose blocks need more shared memory than the GPU has
    is left to its first launch (which steps down to blocks that fit); the others still load, and no error ends the
    parallel compile (before, the whole program then compiled one kernel after another)."""

    from triton.runtime.errors import OutOfResources

    loaded: list[str] = []

    class Kernel:
        def __init__(self, name: str, fits: bool) -> None:
            self.name, self.fits = name, fits

        def _init_handles(self) -> None:
            if not self.fits:
                raise OutOfResources(262144, 232448, "shared memory")
            loaded.append(self.name)

    monkeypatch.setattr(compile_pool, "_on_cuda", lambda args: True)
    monkeypatch.setattr(compile_pool, "_device_of", lambda args: None)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    compile_pool._load_in_threads([Kernel("a", True), Kernel("b", False), Kernel("c", True)], ())
    assert sorted(loaded) == ["a", "c"]
