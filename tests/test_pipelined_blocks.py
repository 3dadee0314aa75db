"""An outer reduction's pipelined loop stages a tile of every operand it loads in shared memory, per stage: codegen
counts the bytes a tile element takes (`KernelSource.tile_bytes`), runtime/config.py takes RBLOCK down until they fit
the GPU, and Triton's own figure for the kernel, compiled for sm_90 here (its CUDA backend compiles without a GPU),
is within that estimate. Before, a ResNet-50 batch-norm backward asked for 256-320 KiB and stepped down at its first
launch, one serial compile each."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import fusionlab as fl
from fusionlab.runtime import config as launch_config
from fusionlab.runtime.config import BlockConfig, KernelShape, pipelined_bytes, shared_memory
from fusionlab.runtime.interpreter import build_module
from fusionlab.runtime.launch import KernelHandle

H100_SHARED = 227 << 10  # what one program may use on an H100 or H200 (shared_memory() without a GPU)
POINTERS = {torch.bfloat16: "*bf16", torch.float32: "*fp32"}


def _products(*operands: torch.Tensor) -> torch.Tensor:
    a, b, c, d, e, f, g, h = operands
    return (a * b + c * d + e * f + g * h).sum((0, 2, 3))  # over all but the channels: contiguous in channels-last


def _operands(dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.randn(4, 64, 6, 6, dtype=dtype).contiguous(memory_format=torch.channels_last) for _ in range(8)]


@pytest.mark.parametrize("dtype, tile_bytes", [(torch.bfloat16, 16), (torch.float32, 32)], ids=str)
def test_codegen_counts_the_tiles_the_loop_loads(dtype: torch.dtype, tile_bytes: int) -> None:
    operands = _operands(dtype)
    ex = fl.explore(_products, *operands)
    (kernel,) = [k for k in ex.generated.kernels if k.kind == "outer_reduction"]
    assert kernel.tile_bytes == tile_bytes, kernel.source
    # (against float32: the kernel sums in float32 and rounds once, eager bfloat16 rounds every product and sum)
    expected = _products(*(o.float() for o in operands))
    torch.testing.assert_close(ex(*operands).float(), expected, atol=0.07, rtol=0.01)


def test_rblock_halves_until_the_tiles_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        assert shared_memory() == H100_SHARED  # (without a GPU: an H100's or H200's)
    monkeypatch.setattr(launch_config, "shared_memory", lambda: H100_SHARED)  # (any GPU: the figures below are theirs)
    sizes = {}
    for tile_bytes in (0, 16, 64, 1024):
        config = KernelShape("outer_reduction", 4096, 100352, False, tile_bytes=tile_bytes).choose("cuda")
        sizes[tile_bytes] = (config.XBLOCK, config.RBLOCK)
    # 32 x 256 tiles of 16 bytes: 2 x 128 KiB staged, over 227 KiB; 32 x 128 fits
    assert sizes == {0: (32, 256), 16: (32, 128), 64: (32, 32), 1024: (32, 16)}, sizes
    assert pipelined_bytes(32, 128, 16) <= H100_SHARED < pipelined_bytes(32, 256, 16)


def test_an_outer_reduction_over_a_few_rows_takes_them_all_in_one_wide_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama's key and value gradients sum 2 query heads each: 16 rows a step left 7/8 of each tile masked
    monkeypatch.setattr(launch_config, "shared_memory", lambda: H100_SHARED)
    gqa = KernelShape("outer_reduction", 4 * 8 * 1024 * 64, 2, False, tile_bytes=4).choose("cuda")
    assert (gqa.XBLOCK, gqa.RBLOCK, gqa.num_warps) == (2048, 2, 2), gqa
    eight = KernelShape("outer_reduction", 1 << 20, 8, False, tile_bytes=4).choose("cuda")
    assert (eight.XBLOCK, eight.RBLOCK) == (512, 8), eight
    few_columns = KernelShape("outer_reduction", 100, 3, False).choose("cuda")
    assert (few_columns.XBLOCK, few_columns.RBLOCK) == (128, 4), few_columns
    nine = KernelShape("outer_reduction", 1 << 20, 9, False).choose("cuda")
    assert (nine.XBLOCK, nine.RBLOCK) == (32, 16), nine  # more rows: the looped tiles as before


def test_tritons_figure_is_within_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel compiled for sm_90 with the config chosen at ResNet-50's widest batch norm (4096 channels and
    more take 32 columns a program) fits; the config chosen without counting its tiles does not."""
    monkeypatch.setattr(launch_config, "shared_memory", lambda: H100_SHARED)
    launches: dict[str, tuple[KernelHandle, tuple[Any, ...], int, int]] = {}
    launch = KernelHandle.launch

    def record(self: KernelHandle, *args: Any, xnumel: int, rnumel: int = 1) -> None:
        launches.setdefault(self.name, (self, args, xnumel, rnumel))
        launch(self, *args, xnumel=xnumel, rnumel=rnumel)

    monkeypatch.setattr(KernelHandle, "launch", record)
    operands = _operands(torch.bfloat16)
    fl.explore(_products, *operands)(*operands)
    (handle, args, xnumel, rnumel), = [v for v in launches.values() if v[0].kind == "outer_reduction"]
    chosen = KernelShape("outer_reduction", 4096, 100352, False, tile_bytes=handle.tile_bytes).choose("cuda")
    uncounted = KernelShape("outer_reduction", 4096, 100352, False).choose("cuda")
    assert (chosen.RBLOCK, uncounted.RBLOCK) == (128, 256)
    fits = _shared(handle, args, xnumel, rnumel, chosen)
    assert pipelined_bytes(chosen.XBLOCK, chosen.RBLOCK, 16) - (16 << 10) <= fits \
        <= pipelined_bytes(chosen.XBLOCK, chosen.RBLOCK, 16) <= H100_SHARED, fits
    assert _shared(handle, args, xnumel, rnumel, uncounted) > H100_SHARED


def _shared(handle: KernelHandle, args: tuple[Any, ...], xnumel: int, rnumel: int, config: BlockConfig) -> int:
    """The shared memory Triton gives the kernel compiled for sm_90 with `config`, specialised as a launch with
    `args` would be (16-byte aligned pointers, integers equal to 1 folded, multiples of 16 so marked)."""
    function = build_module(handle.source, handle.name, interpret=False)[handle.name]
    shape = KernelShape(handle.kind, xnumel, rnumel, handle.persistent)
    signature: dict[str, str] = {}
    constants: dict[tuple[int, ...], Any] = {}
    attributes: dict[tuple[int, ...], list[list[Any]]] = {}
    for position, value in enumerate((*args, *shape.numels)):
        name = function.arg_names[position]
        if isinstance(value, torch.Tensor):
            signature[name], attributes[(position,)] = POINTERS[value.dtype], [["tt.divisibility", 16]]
        elif value == 1:
            signature[name], constants[(position,)] = "constexpr", 1
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attributes[(position,)] = [["tt.divisibility", 16]]
    meta = config.meta(shape)
    for position, name in enumerate(function.arg_names):
        if name in meta:
            signature[name], constants[(position,)] = "constexpr", meta[name]
    compiled = triton.compile(ASTSource(function, signature, constants, attributes), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config.num_warps})
    return int(compiled.metadata.shared)


def test_a_short_outer_reduction_with_more_running_tiles_takes_fewer_columns() -> None:
    # a Welford pass keeps three tiles: the same registers per thread as two sums at 4096 elements
    two = KernelShape("outer_reduction", 1 << 20, 4, False, accumulators=2).choose("cuda")
    three = KernelShape("outer_reduction", 1 << 20, 4, False, accumulators=3).choose("cuda")
    eight = KernelShape("outer_reduction", 1 << 20, 4, False, accumulators=8).choose("cuda")
    assert [c.XBLOCK * c.RBLOCK for c in (two, three, eight)] == [4096, 2048, 1024]
