"""One workload: a named function with inputs at a CPU size and a GPU size, and the least bytes it must move.

The suite's table (measure/workloads.py) lists them; the functions live beside it, by what they are
(measure/training_workloads.py, measure/model_workloads.py). The helpers here make reproducible inputs on any
device, the meta device included (shapes only: what the GPU size would allocate).

    >>> workload = Workload("double", lambda x: 2 * x, matrices(1, cpu=(4, 8), gpu=(8192, 8192)), "memory", "2x")
    >>> fn, (x,) = workload.build("gpu", "meta")
    >>> x.shape, x.dtype
    (torch.Size([8192, 8192]), torch.bfloat16)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

__all__ = ["Bound", "DeviceLike", "InputFactory", "Size", "Workload", "default_dtype", "indices", "input_output_bytes",
           "matrices", "no_flops", "random_tensor", "tensor_bytes"]

Size = Literal["cpu", "gpu"]
Bound = Literal["memory", "compute"]
DeviceLike = str | torch.device
InputFactory = Callable[[Size, DeviceLike, torch.dtype], tuple[Any, ...]]

# Added to every seed `random_tensor` and `indices` draw from: `Workload.fresh_inputs` draws other values of the same
# kind (softmax rows stay probabilities, a second moment stays non-negative, indices stay in range).
_DRAW = contextvars.ContextVar("fusionlab_workload_draw", default=0)


@contextlib.contextmanager
def _draw(number: int) -> Iterator[None]:
    token = _DRAW.set(number * 1_000_003)
    try:
        yield
    finally:
        _DRAW.reset(token)


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
    `min_bytes` is what the function must move at least (by default every input read and every output written
    once; an indexed load reads only the rows it gathers, an in-place update writes what it updates).
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

    def fresh_inputs(self, size: Size = "cpu", device: DeviceLike = "cpu", dtype: torch.dtype | None = None,
                     draw: int = 1) -> tuple[Any, ...]:
        """Inputs made as `build` makes them, from other seeds: new values with the workload's own constraints, for
        a correctness check on inputs the program was not explored on (draw 0 gives `build`'s own)."""
        with _draw(draw):
            return self.make_inputs(size, device, dtype if dtype is not None else default_dtype(size))

    def __repr__(self) -> str:
        return f"Workload({self.name}: {self.bound}-bound, {self.description})"


def default_dtype(size: Size) -> torch.dtype:
    """bf16 at the GPU size (what a model runs in), fp32 at the CPU size (the interpreter's best case)."""
    return torch.bfloat16 if size == "gpu" else torch.float32


def random_tensor(shape: tuple[int, ...], device: DeviceLike, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Normal random values from their own generator (the caller's RNG is left alone); empty on the meta device."""
    where = torch.device(device)
    if where.type == "meta":  # shapes only: what the GPU size would allocate, without allocating it
        return torch.empty(shape, device=where, dtype=dtype)
    generator = torch.Generator(device=where).manual_seed(seed + _DRAW.get())
    return torch.randn(shape, generator=generator, device=where, dtype=dtype)


def indices(shape: tuple[int, ...], high: int, device: DeviceLike, seed: int) -> torch.Tensor:
    """int64 indices in [0, high), every value drawn at random (fresh inputs drawn like them stay in range)."""
    where = torch.device(device)
    if where.type == "meta":
        return torch.empty(shape, device=where, dtype=torch.int64)
    generator = torch.Generator(device=where).manual_seed(seed + _DRAW.get())
    return torch.randint(0, high, shape, generator=generator, device=where, dtype=torch.int64)


def matrices(count: int, vectors: int = 0, *, cpu: tuple[int, ...], gpu: tuple[int, ...]) -> InputFactory:
    """A factory for `count` tensors of the size's shape, then `vectors` vectors as long as its last dimension."""

    def make(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
        shape = gpu if size == "gpu" else cpu
        full = tuple(random_tensor(shape, device, dtype, seed=i) for i in range(count))
        short = tuple(random_tensor((shape[-1],), device, dtype, seed=count + i) for i in range(vectors))
        return (*full, *short)

    return make
