"""A fused attention's operands reach it in the layout they were traced in (decompose/operand_layout.py): a rotary
embedding's query, which eager returns in the order of the projection's view ([B, H, S, D] laid out as [B, S, H, D]),
is stored so by its kernel, so the attention's result (which follows its query's layout on CUDA) goes back to
[B, S, H * D] without a copy. Checked: the strides the attention op is called with equal eager's; the values and a
training step's gradients equal eager's on fresh inputs, at oblong and square sizes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.decompose.operand_layout import ATTENTION_OPS


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryAttention(torch.nn.Module):
    """Llama's attention in a few lines: projections viewed as heads and transposed, rotary q and k, causal SDPA."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.q, self.k, self.v))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(batch, length, width))


def _inputs(batch: int, length: int, width: int, heads: int) -> tuple[torch.Tensor, ...]:
    angles = torch.randn(length, width // heads)
    return torch.randn(batch, length, width), angles.cos(), angles.sin()


class _AttentionStrides(TorchDispatchMode):
    """The strides of the tensors each fused attention op is called with."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[tuple[int, ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket in ATTENTION_OPS:
            self.calls.append([tuple(a.stride()) for a in args if isinstance(a, torch.Tensor)])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("sizes", [(2, 12, 96, 4), (4, 16, 64, 4), (4, 16, 16, 1)],
                         ids=["oblong", "square", "one-head"])
def test_the_attention_reads_its_query_as_eager_lays_it_out(sizes: tuple[int, int, int, int]) -> None:
    torch.manual_seed(0)
    module = RotaryAttention(sizes[2], sizes[3]).eval()
    ex = fl.explore(module, *_inputs(*sizes))
    ex.compiled  # noqa: B018 - built before the strides are recorded (tracing runs the attention on fake tensors)
    fresh = _inputs(*sizes)
    with torch.no_grad(), _AttentionStrides() as eager:
        expected = module(*fresh)
    with _AttentionStrides() as ours:
        got = ex(*fresh)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert eager.calls and ours.calls == eager.calls, (ours.calls, eager.calls)


def test_a_training_step_through_the_backend_keeps_the_traced_layout_and_eagers_gradients() -> None:
    torch.manual_seed(0)
    module = RotaryAttention(64, 4)
    twin = copy.deepcopy(module)
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    compiled = torch.compile(module, backend="fusionlab")
    for step in range(2):
        x, cos, sin = _inputs(2, 16, 64, 4)
        compiled(x, cos, sin).square().mean().backward()
        twin(x, cos, sin).square().mean().backward()
        for (name, p), want in zip(module.named_parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p.grad, want.grad, rtol=1e-4, atol=1e-6, msg=f"step {step}: {name}")
    forward = next(g for g in dynamo_backend.since(before) if g.role == "forward")
    wrapper = forward.exploration.generated.program.wrapper
    attention = next(line for line in wrapper.splitlines() if "attention" in line and "= const_" in line)
    assert "_as_traced" in attention, attention  # the rotary query, stored in the traced order, is what it reads
    torch._dynamo.reset()
