"""Padded products (decompose/matmul_rules.py): on a GPU, a cuBLAS product whose output rows are not 16-byte aligned
(a vocabulary of 50257 words) runs on a weight padded with zero columns and is read back through a slice; a product
contracting such a dimension (the backward's) pads both operands with zeros there. The rule is exercised on the CPU
here by letting it pad CPU products of any size; each case equals eager on fresh inputs and returns eager's
strides."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.decompose import matmul_rules


@pytest.fixture
def pad_on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(matmul_rules, "PAD_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(matmul_rules, "PAD_MIN_FLOPS", 0)
    yield


CASES: dict[str, Callable[..., torch.Tensor]] = {
    "tied_head": lambda x, w, b: x @ w.t(),  # GPT-2's lm_head: the embedding's transpose
    "linear_bias_out": lambda x, w, b: F.linear(x, w, b),  # BERT's decoder: addmm, returned
    "linear_gelu": lambda x, w, b: F.gelu(F.linear(x, w, b)),  # the bias joins the consumer's kernel
    "linear_3d_flattened": lambda x, w, b: F.linear(x.view(4, -1, x.shape[-1]), w).view(-1),
    "linear_3d_returned": lambda x, w, b: F.linear(x.view(4, -1, x.shape[-1]), w),  # mm, then _unsafe_view
    "contiguous_weight": lambda x, w, b: x @ w.t().contiguous(),
    "softmax_of_logits": lambda x, w, b: torch.softmax(x @ w.t(), -1),  # a consumer reads the slice
    "contract_the_vocabulary": lambda x, w, b: (x @ w.t()) @ w,  # the input's gradient: k padded
    "transposed_left": lambda x, w, b: (x @ w.t()).t() @ x,  # the weight's gradient: m padded, rows sliced
    "as_strided_reader": lambda x, w, b: (x @ w.t()).as_strided((2002,), (1,)) * 2,  # reads the storage
}


def _nodes(ex: fl.Exploration, op: str) -> list[str]:
    return [n.name for n in ex.decomposed.graph.nodes if n.op == op]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_padded_product_matches_eager(pad_on_cpu: None, case: str, dtype: torch.dtype) -> None:
    fn = CASES[case]
    x, w, b = torch.randn(64, 96, dtype=dtype), torch.randn(1001, 96, dtype=dtype), torch.randn(1001, dtype=dtype)
    ex = fl.explore(fn, x, w, b)
    assert _nodes(ex, "pad") and _nodes(ex, "slice"), ex.decomposed.as_text()
    reasons = [dict(n.params)["reason"] for n in ex.decomposed.graph.nodes if n.kind == "extern"]
    assert any("1001 -> 1004" in r or "1001 -> 1008" in r for r in reasons), reasons
    fresh = (torch.randn_like(x), torch.randn_like(w), torch.randn_like(b))
    expected, actual = fn(*fresh), ex(*fresh)
    assert actual.stride() == expected.stride()
    tolerance = dict(rtol=2e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(actual, expected, **tolerance)


def test_no_padding_when_aligned_small_or_on_the_cpu(pad_on_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = torch.randn(64, 96), torch.randn(1000, 96)  # 1000 float32 values: 16-byte aligned rows
    assert not _nodes(fl.explore(CASES["tied_head"], x, w, None), "pad")
    w = torch.randn(1001, 96)
    monkeypatch.setattr(matmul_rules, "PAD_MIN_FLOPS", 1 << 40)
    assert not _nodes(fl.explore(CASES["tied_head"], x, w, None), "pad")
    monkeypatch.setattr(matmul_rules, "PAD_MIN_FLOPS", 0)
    monkeypatch.setattr(matmul_rules, "PAD_DEVICES", frozenset({"cuda"}))
    assert not _nodes(fl.explore(CASES["tied_head"], x, w, None), "pad")


def test_gradients_through_a_padded_head(pad_on_cpu: None) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(1001, 96)
    x = torch.randn(64, 96, requires_grad=True)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x @ embedding.weight.t(), -1).mean()

    step(x).backward()
    expected_x, expected_w = x.grad, embedding.weight.grad
    x.grad, embedding.weight.grad = None, None
    before = dynamo_backend.mark()
    torch.compile(step, backend=fl.backend)(x).backward()
    assert any(_nodes(g.exploration, "pad") for g in dynamo_backend.since(before)), "the head was not padded"
    torch.testing.assert_close(x.grad, expected_x, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(embedding.weight.grad, expected_w, rtol=1e-4, atol=1e-6)


def test_a_broadcast_bias_keeps_addmm_unpadded(pad_on_cpu: None) -> None:
    # A one-element bias broadcasts over the product's columns: padded to n + pad it would not.
    x, w, b = torch.randn(64, 96), torch.randn(1001, 96), torch.randn(1)
    fn = lambda x, w, b: torch.addmm(b, x, w.t())  # noqa: E731
    ex = fl.explore(fn, x, w, b)
    assert not _nodes(ex, "pad")
    fresh = (torch.randn_like(x), torch.randn_like(w), torch.randn_like(b))
    torch.testing.assert_close(ex(*fresh), fn(*fresh), rtol=1e-4, atol=1e-4)


def test_a_returned_3d_head_has_eager_strides_through_the_backend(pad_on_cpu: None) -> None:
    torch._dynamo.reset()
    head = torch.nn.Linear(96, 1001, bias=False)
    h = torch.randn(4, 16, 96)
    before = dynamo_backend.mark()
    out = torch.compile(lambda t: head(t), backend=fl.backend)(h)
    assert any(_nodes(g.exploration, "pad") for g in dynamo_backend.since(before))
    assert out.stride() == head(h).stride()
    torch.testing.assert_close(out.view(-1), head(h).view(-1), rtol=1e-4, atol=1e-4)


def test_a_transformers_gpt2_with_an_unaligned_vocabulary(pad_on_cpu: None) -> None:
    # A real model end to end: GPT-2 with a 1001-word vocabulary, a training step and inference through the backend
    # with its head products padded, against eager.
    import copy

    transformers = pytest.importorskip("transformers")
    GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel  # noqa: N806

    torch._dynamo.reset()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1001, n_embd=64, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0,
                        embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0)
    eager = GPT2LMHeadModel(config).train()
    ours = copy.deepcopy(eager)
    ids = torch.randint(0, 1001, (2, 16))
    before = dynamo_backend.mark()
    expected = eager(input_ids=ids, labels=ids).loss
    actual = torch.compile(ours, backend=fl.backend)(input_ids=ids, labels=ids).loss
    expected.backward()
    actual.backward()
    assert sum(len(_nodes(g.exploration, "pad")) for g in dynamo_backend.since(before)) >= 2  # forward and backward
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    for theirs, mine in zip(eager.parameters(), ours.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5 * float(theirs.grad.abs().max()))
    with torch.no_grad():
        logits = torch.compile(ours.eval(), backend=fl.backend)(input_ids=ids).logits
        reference = eager.eval()(input_ids=ids).logits
    assert logits.stride() == reference.stride()
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)
