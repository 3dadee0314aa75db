"""Named workloads: the functions fusionlab is measured on, with inputs at a CPU size and a GPU size.

The GPU size fills an H200 (bf16 8192 x 8192 for the memory-bound ones defined here; a real model's shape for
what models produce: measure/training_workloads.py and measure/model_workloads.py, whose workloads follow these
twelve in the suite); the CPU size is small enough that Triton's interpreter runs the fused kernels in seconds.

    >>> workload = get("softmax")
    >>> function, inputs = workload.build("cpu", "cpu", torch.float32)
    >>> function(*inputs).shape
    torch.Size([64, 256])
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as functional
from torch import nn

from fusionlab.measure.model_workloads import MODEL_WORKLOADS
from fusionlab.measure.training_workloads import TRAINING_WORKLOADS
from fusionlab.measure.workload import (
    DeviceLike,
    InputFactory,
    Size,
    Workload,
    default_dtype,
    input_output_bytes,
    matrices,
    no_flops,
    random_tensor,
    tensor_bytes,
)

__all__ = ["Workload", "GPTBlock", "get", "names", "all_workloads", "tensor_bytes", "find", "default_dtype", "Size",
           "input_output_bytes", "no_flops"]

_random = random_tensor


def _matrices_and_vectors(count: int, vectors: int = 0) -> InputFactory:
    """A factory for `count` (M, N) matrices followed by `vectors` vectors of length N (8192 x 8192 on a GPU)."""
    return matrices(count, vectors, cpu=(64, 256), gpu=(8192, 8192))


# ---- the functions -------------------------------------------------------------------------------------


def gelu_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return functional.gelu(x + bias)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return functional.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return functional.silu(gate) * up


def add_layer_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x + residual
    return summed, functional.layer_norm(summed, (x.shape[-1],), weight, bias, eps=1e-5)


def residual_chain(
    x: torch.Tensor, residual1: torch.Tensor, residual2: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    # Unfused: three kernels, each reading two tensors and writing one; fused: read four, write one.
    return torch.relu((x + bias) + residual1) + residual2


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def column_normalize(x: torch.Tensor) -> torch.Tensor:
    # Reductions over axis 0 feeding a pointwise op over the whole matrix: a fusion across axes.
    mean = x.mean(dim=0, keepdim=True)
    centered = x - mean
    return centered * torch.rsqrt(centered.pow(2).mean(dim=0, keepdim=True) + 1e-5)


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return functional.gelu(x @ weight + bias)


def _linear_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    rows, inner, columns = (8192, 4096, 16384) if size == "gpu" else (64, 128, 256)
    scale = 1.0 / math.sqrt(inner)
    return (
        _random((rows, inner), device, dtype, seed=0),
        _random((inner, columns), device, dtype, seed=1) * scale,
        _random((columns,), device, dtype, seed=2),
    )


def _linear_flops(inputs: tuple[Any, ...]) -> int:
    x, weight = inputs[0], inputs[1]
    return 2 * x.shape[0] * x.shape[1] * weight.shape[1]


# ---- a GPT-style block ---------------------------------------------------------------------------------

_GPT_DIMENSIONS: dict[str, dict[str, int]] = {
    "gpu": {"batch": 4, "tokens": 1024, "width": 2048, "heads": 16},
    "cpu": {"batch": 2, "tokens": 16, "width": 64, "heads": 4},
}


class GPTBlock(nn.Module):
    """A pre-norm transformer block: x + attention(layer_norm(x)), then + mlp(layer_norm(.)).

    Attention is written out (q @ k^T, causal mask, softmax, @ v) so that every op is visible to fusion.
    Example: `GPTBlock(width=64, heads=4, tokens=16)(torch.randn(2, 16, 64))`.
    """

    workload_name = "gpt_block"

    def __init__(self, width: int, heads: int, tokens: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"GPTBlock width {width} must be a multiple of heads {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.projection = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.expand = nn.Linear(width, 4 * width)
        self.contract = nn.Linear(4 * width, width)
        causal = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        head_width = width // self.heads
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.reshape(batch, tokens, self.heads, head_width).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_width))
        scores = scores.masked_fill(self.mask, float("-inf"))
        attended = torch.softmax(scores, dim=-1) @ v
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.contract(functional.gelu(self.expand(self.norm2(x))))


def _gpt_module(size: Size, device: DeviceLike, dtype: torch.dtype) -> nn.Module:
    dims = _GPT_DIMENSIONS[size]
    where = torch.device(device)
    # Built on the device itself (no host copy of the weights), seeded without disturbing the caller's RNG.
    with torch.random.fork_rng(devices=[where] if where.type == "cuda" else []), where:
        torch.manual_seed(0)
        block = GPTBlock(width=dims["width"], heads=dims["heads"], tokens=dims["tokens"])
    return block.to(dtype=dtype).eval().requires_grad_(False)


def _gpt_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    dims = _GPT_DIMENSIONS[size]
    return (_random((dims["batch"], dims["tokens"], dims["width"]), device, dtype, seed=0),)


def _gpt_flops(inputs: tuple[Any, ...]) -> int:
    batch, tokens, width = inputs[0].shape
    rows = batch * tokens
    linears = 2 * rows * width * (3 * width + width + 4 * width + 4 * width)
    attention = 2 * 2 * batch * tokens * tokens * width  # q @ k^T and scores @ v
    return linears + attention


# ---- the table -----------------------------------------------------------------------------------------

_WORKLOADS: tuple[Workload, ...] = (
    Workload("gelu_bias", gelu_bias, _matrices_and_vectors(1, 1), "memory", "gelu(x + b)"),
    Workload("softmax", softmax, _matrices_and_vectors(1), "memory", "softmax over the last axis"),
    Workload("log_softmax", log_softmax, _matrices_and_vectors(1), "memory", "log_softmax, last axis"),
    Workload("layer_norm", layer_norm, _matrices_and_vectors(1, 2), "memory", "layer_norm, weight, bias"),
    Workload("rms_norm", rms_norm, _matrices_and_vectors(1, 1), "memory", "x * rsqrt(mean(x^2) + eps) * w"),
    Workload("swiglu", swiglu, _matrices_and_vectors(2), "memory", "silu(a) * b"),
    Workload(
        "add_layer_norm", add_layer_norm, _matrices_and_vectors(2, 2), "memory",
        "(x + r, layer_norm(x + r)): two outputs",
    ),
    Workload(
        "residual_chain", residual_chain, _matrices_and_vectors(3, 1), "memory",
        "relu((x + b) + r1) + r2: a pointwise chain with four inputs",
    ),
    Workload("sum_rows", sum_rows, _matrices_and_vectors(1), "memory", "sum over axis 0"),
    Workload(
        "column_normalize", column_normalize, _matrices_and_vectors(1), "memory",
        "(x - mean0(x)) * rsqrt(var0(x) + eps): reductions over axis 0 feeding pointwise ops",
    ),
    Workload(
        "linear_gelu", linear_gelu, _linear_inputs, "compute", "gelu(x @ W + b): matmul with an epilogue",
        flops=_linear_flops,
    ),
    Workload(
        "gpt_block", None, _gpt_inputs, "compute",
        "pre-norm transformer block: layer_norm, qkv, causal softmax attention, gelu MLP, residuals",
        flops=_gpt_flops, make_module=_gpt_module,
    ),
)


_WORKLOADS = _WORKLOADS + TRAINING_WORKLOADS + MODEL_WORKLOADS


def all_workloads() -> tuple[Workload, ...]:
    """Every workload, in suite order."""
    return _WORKLOADS


def names() -> tuple[str, ...]:
    """The workload names, in suite order."""
    return tuple(workload.name for workload in _WORKLOADS)


def get(name: str) -> Workload:
    """The workload called `name`."""
    for workload in _WORKLOADS:
        if workload.name == name:
            return workload
    raise KeyError(f"no workload named {name!r}: choose one of {', '.join(names())}")


def find(fn: Any) -> Workload | None:
    """The workload whose function `fn` is (or whose module `fn` is an instance of); None otherwise."""
    for workload in _WORKLOADS:
        if workload.fn is not None and workload.fn is fn:
            return workload
        if isinstance(fn, nn.Module) and getattr(type(fn), "workload_name", None) == workload.name:
            return workload
    return None
