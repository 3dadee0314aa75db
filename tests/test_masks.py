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


@torch.library.custom_op("fusionlab_test::block_first_row", mutates_args=("mask",))
def _block_first_row(mask: torch.Tensor) -> None:
    mask[0, 1:] = float("-inf")


def _write_first_row(mask: torch.Tensor) -> torch.Tensor:
    mask[0, 1:] = float("-inf")
    return mask[1:].sum()


def _written_after(kind: str) -> Any:
    """Masks whose producers say "keeps everything" but that are written in place afterwards."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        if kind == "masked_fill_ from an input":  # the usual padding mask
            mask: Any = torch.zeros(q.shape[0], 1, 1, k.shape[-2])
            mask.masked_fill_(padding[:, None, None, :] == 0, float("-inf"))
        elif kind == "item assignment":
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            mask[:, : k.shape[-2] // 2] = float("-inf")
        elif kind == "tril_":
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)
            mask.tril_()
        elif kind == "a view's fill_":
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)
            mask[0].fill_(False)
            mask[0, 0] = True
        elif kind == "aten overload":  # named "fill_.Scalar": its schema says it writes
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            torch.ops.aten.fill_.Scalar(mask[0, 1:], float("-inf"))
        elif kind == "aten copy_":
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            torch.ops.aten.copy_.default(mask, torch.triu(torch.full(mask.shape, float("-inf")), 1))
        elif kind == "__iand__":
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)
            mask.__iand__(torch.ones_like(mask).tril())
        elif kind == "custom op":  # mutates_args=
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            _block_first_row(mask)
        elif kind == "an aten view's fill_":  # a view made by an op whose schema returns an alias
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            torch.ops.aten.slice.Tensor(mask, 1, 0, 1).fill_(float("-inf"))  # the first key masked
        elif kind == "Tensor.view as a function":
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            torch.Tensor.view(mask, -1)[1:3].fill_(float("-inf"))
        else:  # written inside a higher-order op's body
            mask = torch.zeros(q.shape[-2], k.shape[-2])
            kept = torch.utils.checkpoint.checkpoint(_write_first_row, mask, use_reentrant=False)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) + kept * 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return fn


@pytest.mark.parametrize("kind", ["masked_fill_ from an input", "item assignment", "tril_", "a view's fill_",
                                  "aten overload", "aten copy_", "__iand__", "custom op", "checkpointed body",
                                  "an aten view's fill_", "Tensor.view as a function"])
def test_a_mask_written_in_place_after_it_is_built_is_kept(kind: str) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=gen) for _ in range(3))
    padding = torch.ones(2, 6)
    padding[:, 4:] = 0
    fn = _written_after(kind)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="fusionlab")(q, k, v, padding), fn(q, k, v, padding))
    torch._dynamo.reset()


def test_dropping_a_mask_keeps_the_graphs_other_writes() -> None:
    # the graph is not functional: an input written in place, or through out=, must still be written
    def fn(q: torch.Tensor, counter: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        keep = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool)  # keeps everything: dropped
        counter.add_(1)
        torch.mul(q[0, 0, 0], 2, out=buf)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=keep)

    q = torch.randn(1, 2, 4, 8)
    counters, buffers = [torch.zeros(()), torch.zeros(())], [torch.zeros(8), torch.zeros(8)]
    want = fn(q, counters[0], buffers[0])
    torch._dynamo.reset()
    got = torch.compile(fn, backend="fusionlab")(q, counters[1], buffers[1])
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    assert counters[1].item() == 1.0 and torch.equal(buffers[0], buffers[1])


def test_writes_elsewhere_in_the_graph_do_not_keep_a_mask() -> None:
    # the mask's positions also feed other values written in place, and two layers share the mask with an in-place
    # residual after each: nothing writes the mask itself, so it is dropped from both calls
    def fn(x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[-2])
        keep = positions[None, :] >= 0
        scaled = x * positions[:, None].float()
        scaled.mul_(0.5)
        a = F.scaled_dot_product_attention(x, x, scaled, attn_mask=keep)
        a += x
        b = F.scaled_dot_product_attention(a, a, a, attn_mask=keep)
        b += a
        return b

    graph_module = _dynamo_graph(_AsModule(fn), torch.randn(1, 2, 5, 8))
    assert len(drop_empty_masks(graph_module)) == 2


class _AsModule(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.fn(*inputs)
