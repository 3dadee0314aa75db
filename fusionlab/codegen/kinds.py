"""The kinds of generated kernel: how the code generator shaped a group's kernel, and so how it is launched.

    pointwise        flat over the group's elements: one size argument, xnumel
    tiled            pointwise over a 2-D tile [rows, trailing dimensions] (broadcast operands read by row or column)
    reduction        rows reduced in registers (persistent) or in a loop
    outer_reduction  a reduction over leading axes (or over trailing ones of an operand whose unit stride is on a
                     kept dimension, a channels-last value summed over H and W): strided [XBLOCK, RBLOCK] tiles,
                     software-pipelined
    matmul           one 2-D product in [BLOCK_M, BLOCK_N] tiles, then its pointwise epilogue

    >>> kernel_kind("reduction")
    'reduction'
"""

from __future__ import annotations

from typing import Literal, cast, get_args

KernelKind = Literal["pointwise", "tiled", "reduction", "outer_reduction", "matmul"]
KERNEL_KINDS: tuple[KernelKind, ...] = get_args(KernelKind)
# Launched over [rows, columns] of the output (a tiled kernel's columns: KernelSource.columns; a matmul's: N): an
# xnumel of rows and an rnumel of columns.
TILE_KINDS: tuple[KernelKind, ...] = ("tiled", "matmul")


def kernel_kind(kind: str) -> KernelKind:
    """A group's kind as the kind of its kernel (a pointwise or reduction group's, before tiling decides)."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"a {kind!r} group has no kernel: kernels are one of {KERNEL_KINDS}")
    return cast(KernelKind, kind)
