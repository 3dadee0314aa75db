"""Named workloads: the functions fusionlab is measured on, with inputs at a CPU size and a GPU size.

The GPU size fills an H200 (bf16 8192 x 8192 for the memory-bound ones); the CPU size is small enough that
Triton's interpreter runs the fused kernels in seconds.

    >>> workload = get("softmax")
    >>> function, inputs = workload.build("cpu", "cpu", torch.float32)
    >>> function(*inputs).shape
    torch.Size([64, 256])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as functional
from torch import nn

__all__ = ["Workload", "GPTBlock", "get", "names", "all_workloads", "tensor_bytes", "find"]

Size = Literal["cpu", "gpu"]
Bound = Literal["memory", "compute"]
DeviceLike = str | torch.device
InputFactory = Callable[[Size, DeviceLike, torch.dtype], tuple[Any, ...]]


def tensor_bytes(value: Any) -> int:
    """Bytes held by the tensors in `value` (a tensor, a nested tuple/list/dict, or a module's state)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, nn.Module):
        return sum(tensor_bytes(t) for t in (*value.parameters(), *value.buffers()))
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(item) for item in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(item) for item in value.values())
    return 0


def input_output_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    """The least any program must move: read every input once, write every output once."""
    return tensor_bytes(inputs) + tensor_bytes(outputs)


def no_flops(inputs: tuple[Any, ...]) -> int:
    """Memory-bound workloads: their arithmetic is not what limits them."""
    return 0


@dataclass(frozen=True)
class Workload:
    """One named function with its inputs at two sizes.

    Module workloads (`gpt_block`) have `fn=None` and a `make_module`, because their weights' shapes depend
    on the size; `build` handles both kinds. Example: `fn, inputs = get("swiglu").build("gpu", "cuda")`.
    """

    name: str
    fn: Callable[..., Any] | None
    make_inputs: InputFactory
    bound: Bound
    description: str
    min_bytes: Callable[[tuple[Any, ...], Any], int] = input_output_bytes
    flops: Callable[[tuple[Any, ...]], int] = no_flops
    make_module: Callable[[Size, DeviceLike, torch.dtype], nn.Module] | None = field(default=None)

    def build(
        self, size: Size = "cpu", device: DeviceLike = "cpu", dtype: torch.dtype | None = None
    ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The callable (function or module on `device`) and its inputs; dtype defaults by size."""
        if size not in ("cpu", "gpu"):
            raise ValueError(f"workload size must be 'cpu' or 'gpu', got {size!r}")
        chosen = dtype if dtype is not None else default_dtype(size)
        inputs = self.make_inputs(size, device, chosen)
        if self.make_module is not None:
            return self.make_module(size, device, chosen), inputs
        if self.fn is None:
            raise ValueError(f"workload {self.name!r} has neither fn nor make_module: give it one")
        return self.fn, inputs

    def __repr__(self) -> str:
        return f"Workload({self.name}: {self.bound}-bound, {self.description})"


def default_dtype(size: Size) -> torch.dtype:
    """bf16 at the GPU size (what a model runs in), fp32 at the CPU size (the interpreter's best case)."""
    return torch.bfloat16 if size == "gpu" else torch.float32


def _random(shape: tuple[int, ...], device: DeviceLike, dtype: torch.dtype, seed: int) -> torch.Tensor:
    where = torch.device(device)
    if where.type == "meta":  # shapes only: what the GPU size would allocate, without allocating it
        return torch.empty(shape, device=where, dtype=dtype)
    generator = torch.Generator(device=where).manual_seed(seed)
    return torch.randn(shape, generator=generator, device=where, dtype=dtype)


def _rows_columns(size: Size) -> tuple[int, int]:
    return (8192, 8192) if size == "gpu" else (64, 256)


def _matrices_and_vectors(matrices: int, vectors: int = 0) -> InputFactory:
    """A factory for `matrices` (M, N) matrices followed by `vectors` vectors of length N."""

    def make(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
        rows, columns = _rows_columns(size)
        full = tuple(_random((rows, columns), device, dtype, seed=i) for i in range(matrices))
        short = tuple(_random((columns,), device, dtype, seed=matrices + i) for i in range(vectors))
        return (*full, *short)

    return make


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
