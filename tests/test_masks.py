"""Attention masks built from sizes alone (transformers' under torch.compile) that mask nothing are dropped from the
Dynamo graph before differentiation (fusionlab/capture/masks.py), so that attention keeps PyTorch's fused kernels in
the forward and the backward. Checked: which masks go and which stay, on Dynamo's own graphs, and that a training
step through the backend equals eager's, outputs and gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fusionlab import dynamo_backend
from fusionlab.capture.masks import drop_empty_masks


class Attention(torch.nn.Module):
    """Self-attention whose mask `mask_kind` builds from positions only, or from an input ("input")."""

    def __init__(self, mask_kind: str) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.mask_kind = mask_kind

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        positions = torch.arange(n, device=x.device)
        if self.mask_kind == "keep all":  # transformers' padding mask under torch.compile, nothing padded
            mask: Any = (positions[None, None, None, :] >= 0).expand(b, 1, n, n)
        elif self.mask_kind == "additive zeros":
            mask = torch.where(positions[None, None, None, :] >= 0, 0.0, float("-inf")).expand(b, 1, n, n)
        elif self.mask_kind == "causal":
            mask = positions[None, :] <= positions[:, None]
        elif self.mask_kind == "drop first keys":
            mask = (positions[None, None, None, :] >= 2).expand(b, 1, n, n)
        else:  # from an input: never evaluated at capture
            mask = padding[:, None, None, :].expand(b, 1, n, n)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, n, 16)


def _dynamo_graph(module: torch.nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    graphs: list[torch.fx.GraphModule] = []

    def keep(graph_module: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(module, backend=keep)(*inputs)
    torch._dynamo.reset()
    return graphs[0]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 5, 16), torch.ones(2, 5, dtype=torch.bool)


@pytest.mark.parametrize("kind, dropped", [("keep all", True), ("additive zeros", True), ("causal", False),
                                           ("drop first keys", False), ("input", False)])
def test_only_masks_that_keep_every_position_are_dropped(kind: str, dropped: bool) -> None:
    graph_module = _dynamo_graph(Attention(kind), *_inputs())
    names = drop_empty_masks(graph_module)
    assert bool(names) == dropped
    (call,) = [n for n in graph_module.graph.nodes if n.target is F.scaled_dot_product_attention]
    assert (call.kwargs.get("attn_mask") is None) == dropped


@pytest.mark.parametrize("kind", ["keep all", "drop first keys", "input"])
def test_a_training_step_through_the_backend_equals_eager(kind: str) -> None:
    torch.manual_seed(0)
    module = Attention(kind)
    x, padding = _inputs()
    x.requires_grad_(True)
    torch._dynamo.reset()
    got = torch.compile(module, backend="fusionlab")(x, padding)
    got.sum().backward()
    grads = [x.grad.clone(), module.qkv.weight.grad.clone()]
    x.grad, module.qkv.weight.grad = None, None
    want = module(x, padding)
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grads, [x.grad, module.qkv.weight.grad])
    torch._dynamo.reset()
    dynamo_backend.forget()
