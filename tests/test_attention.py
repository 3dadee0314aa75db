"""Attention written as products and a softmax runs as PyTorch's fused attention (decompose/attention.py). Checked:
the forms user code and models write (scale on the scores or on q, an additive mask, a float32 softmax between
casts, permute or transpose, cross-attention lengths, square sizes) become one extern attention and equal eager on
fresh inputs; what must stay products (probabilities read elsewhere, a causal mask by masked_fill, broadcast heads,
a softmax over another dim) stays; a transformers BERT with its eager attention, through the backend."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab import dynamo_backend


def _plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _scaled_q_float_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q * 0.3, k.permute(0, 1, 3, 2))
    return torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(2, 3)) * 0.25 + mask
    return torch.matmul(torch.softmax(scores.float(), -1).to(v.dtype), v)


def _math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # PyTorch's math attention, decomposed: q and k scaled by sqrt(scale), half precision computed in float32, a
    # safe softmax (where(all(scores == -inf), 0, softmax(scores)))
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, scale=0.3)[0]


def _math_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # the same with an additive mask (a model's padding mask, or the all-true mask transformers builds under
    # torch.compile): the mask is added to the float32 scores before the safe softmax, whose decomposition reads
    # the masked scores twice
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask, scale=0.3)[0]


FORMS: dict[str, Callable[..., torch.Tensor]] = {"plain": _plain, "scaled_q_float_softmax": _scaled_q_float_softmax,
                                                  "masked": _masked, "math": _math, "math_masked": _math_masked}
SHAPES = [(2, 4, 16, 16, 8, 8), (1, 3, 7, 19, 16, 4), (3, 2, 32, 32, 32, 32)]  # B, H, T, S, D, Dv (cross, square)


def _inputs(form: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    b, h, t, s, d, dv = shape
    gen = torch.Generator().manual_seed(seed)
    made = [torch.randn(b, h, t, d, generator=gen), torch.randn(b, h, s, d, generator=gen),
            torch.randn(b, h, s, dv, generator=gen)]
    if form in ("masked", "math_masked"):
        made.append(torch.where(torch.rand(b, 1, 1, s, generator=gen) < 0.2, -1e4, 0.0))
    return tuple(x.to(dtype) for x in made)


def _externs(ex: fl.Exploration) -> list[str]:
    return [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"]


ATTENTION = "aten.scaled_dot_product_attention.default"
MASKED = "masked_attention"  # with a mask: eager's NaN kept where a row is masked throughout
SAFE_MASKED = "safe_masked_attention"  # with a mask and a safe softmax: zeros where a row is masked throughout


def _close_as_eager(mine: torch.Tensor, fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]) -> None:
    """Within twice eager's own error against float64, and eager's shape, dtype and strides."""
    theirs, exact = fn(*inputs), fn(*(x.double() for x in inputs))
    assert mine.shape == theirs.shape and mine.dtype == theirs.dtype and mine.stride() == theirs.stride()
    allowed = 2 * (theirs.double() - exact).abs().max().item() + 1e-5
    assert (mine.double() - exact).abs().max().item() <= allowed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_written_attention_runs_fused(form: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    fn = FORMS[form]
    ex = fl.explore(fn, *_inputs(form, shape, dtype, 0))
    expected = {"masked": MASKED, "math_masked": SAFE_MASKED}.get(form, ATTENTION)
    assert expected in _externs(ex) and "aten.bmm.default" not in _externs(ex)
    assert not any("bmm" in aten for aten, _ in ex.decomposed.fallbacks if "attention" not in _)
    fresh = _inputs(form, shape, dtype, 1)
    _close_as_eager(ex(*fresh), fn, fresh)


def _probabilities_too(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.softmax(q @ k.transpose(-2, -1), -1)
    return p @ v, p


def _causal_fill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1)
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v


def _broadcast_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k[:, :1].transpose(-2, -1), -1) @ v[:, :1]


def _other_dim(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1), -2) @ v


@pytest.mark.parametrize("fn", [_probabilities_too, _causal_fill, _broadcast_heads, _other_dim],
                         ids=lambda f: f.__name__)
def test_what_is_not_plain_attention_stays_products(fn: Callable[..., Any]) -> None:
    inputs = _inputs("plain", (2, 3, 8, 8, 4, 4), torch.float32, 0)
    ex = fl.explore(fn, *inputs)
    assert ATTENTION not in _externs(ex) and MASKED not in _externs(ex)
    fresh = _inputs("plain", (2, 3, 8, 8, 4, 4), torch.float32, 1)
    torch.testing.assert_close(ex(*fresh), fn(*fresh))


def test_a_bert_with_eager_attention_through_the_backend() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0  # padding: an additive mask reaches the scores
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        actual = torch.compile(model, backend=fl.backend)(input_ids=ids, attention_mask=mask).last_hidden_state
    externs = [op for g in dynamo_backend.since(before) for op in _externs(g.exploration)]
    assert externs.count(MASKED) == 2, externs  # one per layer: BERT's padding mask reaches the scores
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_a_vit_with_eager_attention_through_the_backend() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=64, attn_implementation="eager")
    model = transformers.ViTModel(config).eval()
    pixels = torch.randn(2, 3, 32, 32)
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    with torch.no_grad():
        expected = model(pixel_values=pixels).last_hidden_state
        actual = torch.compile(model, backend=fl.backend)(pixel_values=pixels).last_hidden_state
    externs = [op for g in dynamo_backend.since(before) for op in _externs(g.exploration)]
    assert externs.count(ATTENTION) == 2 and "aten.bmm.default" not in externs
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_a_float32_result_of_upcast_half_inputs_stays_float32() -> None:
    # float32 copies of fp16 q, k, v whose float32 result the caller keeps: attention runs on the copies (the math
    # attention's cast back to fp16 is what allows running on the fp16 values themselves)
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax((q.float() @ k.float().transpose(-2, -1)) * 0.35, -1) @ v.float()

    inputs = tuple(torch.randn(2, 3, 64, 32).half() for _ in range(3))
    ex = fl.explore(fn, *inputs)
    assert ATTENTION in _externs(ex)
    fresh = tuple(torch.randn(2, 3, 64, 32).half() for _ in range(3))
    torch.testing.assert_close(ex(*fresh), fn(*fresh), rtol=1e-5, atol=1e-5)
    assert ex.verify().ok


def test_a_row_masked_throughout_is_nan_as_in_eager() -> None:
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = torch.zeros(2, 1, 5, 7)
    mask[:, :, 1, :] = float("-inf")  # every key masked for query 1: eager's softmax is 0 / 0
    mask[:, :, 3, :4] = float("-inf")
    ex = fl.explore(_masked, q, k, v, mask)
    assert MASKED in _externs(ex)
    torch.testing.assert_close(ex(q, k, v, mask), _masked(q, k, v, mask), equal_nan=True)


def test_a_row_masked_throughout_is_zero_under_a_safe_softmax() -> None:
    # PyTorch's math attention with a mask, as a GPU trace of a transformers ViT gives it: half-precision q, k, v
    # computed in float32, the mask added to the scores, a safe softmax; a fully masked row gives zeros
    q, k, v = (torch.randn(2, 3, n, 8).to(torch.bfloat16) for n in (5, 7, 7))
    mask = torch.zeros(2, 1, 5, 7, dtype=torch.bfloat16)
    mask[:, :, 1, :] = float("-inf")
    mask[:, :, 3, :4] = float("-inf")
    ex = fl.explore(_math_masked, q, k, v, mask)
    assert SAFE_MASKED in _externs(ex) and "aten.bmm.default" not in _externs(ex)
    got, expected = ex(q, k, v, mask), _math_masked(q, k, v, mask)
    assert (got[:, :, 1] == 0).all() and (expected[:, :, 1] == 0).all()
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


def _bool_mask_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # the path a GPU trace takes: a boolean mask made additive (0 and -inf)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def test_a_boolean_mask_under_the_math_attention_runs_fused_in_half_precision() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen).to(torch.bfloat16) for _ in range(3))
    keep = torch.rand(2, 1, 1, 16, generator=gen) < 0.8
    ex = fl.explore(_bool_mask_math, q, k, v, keep)
    assert SAFE_MASKED in _externs(ex) and "aten.bmm.default" not in _externs(ex)
    attention = next(n for n in ex.decomposed.graph.nodes if n.op == SAFE_MASKED)
    assert ex.decomposed.graph[attention.inputs[0]].type.dtype == torch.bfloat16  # the float32 copies are gone
    fresh = (*(torch.randn(2, 4, 16, 8, generator=gen).to(torch.bfloat16) for _ in range(3)),
             torch.rand(2, 1, 1, 16, generator=gen) < 0.8)
    _close_as_eager(ex(*fresh), _bool_mask_math, fresh)


def test_a_float32_mask_keeps_half_precision_attention_in_float32() -> None:
    # a float32 bias added to the float32 scores of bf16 q, k, v: rounding it to bf16 would change the result, so
    # attention runs on the float32 copies
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        scores = q.float() @ k.float().transpose(-2, -1) * 0.3 + bias
        return (torch.softmax(scores, -1) @ v.float()).to(q.dtype)

    gen = torch.Generator().manual_seed(0)
    made = lambda: (*(torch.randn(2, 3, 8, 16, generator=gen).to(torch.bfloat16) for _ in range(3)),  # noqa: E731
                    torch.randn(2, 1, 8, 8, generator=gen) * 3.0)
    ex = fl.explore(fn, *made())
    attention = next(n for n in ex.decomposed.graph.nodes if n.op == MASKED)
    assert ex.decomposed.graph[attention.inputs[0]].type.dtype == torch.float32
    fresh = made()
    torch.testing.assert_close(ex(*fresh), fn(*fresh))


def _all_true_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # transformers under torch.compile: a padding mask it cannot inspect is built in full from positions (here
    # every position >= 0: nothing masked) and passed to the math attention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    positions = torch.arange(k.shape[-2], device=q.device)
    keep = (positions[None, None, None, :] >= 0).expand(q.shape[0], 1, q.shape[-2], k.shape[-2])
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _some_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    positions = torch.arange(k.shape[-2], device=q.device)
    keep = (positions[None, None, None, :] >= 2).expand(q.shape[0], 1, q.shape[-2], k.shape[-2])
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


@pytest.mark.parametrize("fn, expected", [(_all_true_mask, ATTENTION), (_some_masked, SAFE_MASKED)],
                         ids=["masks nothing", "masks some keys"])
def test_a_mask_built_from_sizes_alone_is_evaluated_at_capture(fn: Callable[..., Any], expected: str) -> None:
    # a mask that masks nothing is dropped (the fused kernels without a mask are the fast ones); one that masks
    # something is kept
    gen = torch.Generator().manual_seed(0)
    made = lambda: tuple(torch.randn(2, 4, 16, 8, generator=gen).to(torch.bfloat16) for _ in range(3))  # noqa: E731
    ex = fl.explore(fn, *made())
    assert expected in _externs(ex) and "aten.bmm.default" not in _externs(ex)
    fresh = made()
    _close_as_eager(ex(*fresh), fn, fresh)


def test_an_integer_bias_keeps_half_precision_attention_in_float32() -> None:
    # 1001 is 1000 in bf16: an int64 bias made float32 is not exact in half precision, so the float32 copies stay
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        scores = q.float() @ k.float().transpose(-2, -1) * 0.3 + bias.float()
        return (torch.softmax(scores, -1) @ v.float()).to(q.dtype)

    q, k, v = (torch.randn(1, 2, 6, 8).to(torch.bfloat16) for _ in range(3))
    bias = 1000 + torch.arange(6)[None, :].expand(6, 6).contiguous()
    ex = fl.explore(fn, q, k, v, bias)
    attention = next(n for n in ex.decomposed.graph.nodes if n.op == MASKED)
    assert ex.decomposed.graph[attention.inputs[0]].type.dtype == torch.float32
    torch.testing.assert_close(ex(q, k, v, bias), fn(q, k, v, bias))
