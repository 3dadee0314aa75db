"""Workloads that models' forward passes produce: long rows, indexed loads, rotary embeddings, masked softmax, and
fused groups harvested from the zoo's models (named after the model and the module they come from).

The harvested ones are the groups `fl.explore` builds from the zoo's tiny GPT-2, Llama and BERT that are more than a
single pointwise op, written here as the transformers modules compute them (no transformers import: the suite runs on
a bare GPU box), at the shapes of the model they are named after: GPT-2 small (16 x 1024 tokens, width 768), Llama 2
7B (4 x 2048 tokens, width 4096), BERT-base (32 x 512 tokens, width 768).

    >>> fn, (ids, table, weight) = MODEL_WORKLOADS[-4].build("gpu", "meta")   # llama_embed_input_layernorm
    >>> tuple(ids.shape), tuple(table.shape)
    ((4, 2048), (32000, 4096))
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as functional

from fusionlab.measure.workload import (
    DeviceLike,
    InputFactory,
    Size,
    Workload,
    indices,
    matrices,
    random_tensor,
    tensor_bytes,
)

__all__ = ["MODEL_WORKLOADS", "apply_rotary", "attention_masked_softmax", "bert_embeddings_layernorm",
           "bert_lm_head_gelu_layernorm", "bias_residual_layer_norm", "embedding_positions", "gpt2_embeddings_ln_1",
           "gpt2_mlp_gelu_new", "llama_embed_input_layernorm", "llama_residual_post_attention_layernorm",
           "moe_dispatch_gather", "rotate_half", "swiglu_chunked", "vocabulary_log_softmax"]


def vocabulary_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax over a vocabulary (GPT-2's 50257 tokens: an odd length, so the last block of a row is partial)."""
    return torch.log_softmax(logits, dim=-1)


def embedding_positions(ids: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A token embedding lookup plus a learned position embedding (GPT-style input embeddings)."""
    where = torch.arange(ids.shape[-1], device=ids.device)
    return functional.embedding(ids, tokens) + functional.embedding(where, positions)


def moe_dispatch_gather(hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A mixture of experts' dispatch: each token's row gathered once per chosen expert, scaled by its router weight."""
    return hidden.index_select(0, index) * weights[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half: the two halves of the last axis swapped, the first negated (a cat of slices)."""
    first, second = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-second, first), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb: cos and sin [batch, tokens, head width] broadcast over the heads."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def attention_masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """BERT-style attention probabilities: scores scaled by 1/sqrt(64), an additive padding mask [batch, 1, 1, keys]
    (0 or the dtype's lowest value), softmax over the keys."""
    return torch.softmax(scores / 8.0 + mask, dim=-1)


def bias_residual_layer_norm(x: torch.Tensor, residual: torch.Tensor, bias: torch.Tensor, weight: torch.Tensor,
                             norm_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection's bias, the residual, then layer_norm (dropout off): the new residual stream and its norm."""
    hidden = x + bias + residual
    return hidden, functional.layer_norm(hidden, (hidden.shape[-1],), weight, norm_bias, eps=1e-5)


def swiglu_chunked(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU over a fused gate-and-up projection's output: silu(first half) * second half (two column slices)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return functional.silu(gate) * up


# ---- groups harvested from the zoo -------------------------------------------------------------------


def gpt2_embeddings_ln_1(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT2Model's input embeddings (wte[ids] + wpe[positions]) fused with h.0.ln_1: the residual stream, its norm."""
    hidden = embedding_positions(ids, wte, wpe)
    return hidden, functional.layer_norm(hidden, (hidden.shape[-1],), weight, bias, eps=1e-5)


def gpt2_mlp_gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's mlp.act (transformers' NewGELUActivation, the tanh approximation), on c_fc's output."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _llama_rms_norm(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # transformers' LlamaRMSNorm: computed in float32, cast back, then scaled by the weight.
    wide = hidden.to(torch.float32)
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6)
    return weight * wide.to(hidden.dtype)


def llama_embed_input_layernorm(ids: torch.Tensor, embed: torch.Tensor,
                                weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """LlamaModel's embed_tokens fused with layers.0.input_layernorm: the residual stream and its RMS norm."""
    hidden = functional.embedding(ids, embed)
    return hidden, _llama_rms_norm(hidden, weight)


def llama_residual_post_attention_layernorm(residual: torch.Tensor, attention: torch.Tensor,
                                            weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Llama decoder layer's residual add after self_attn fused with post_attention_layernorm."""
    hidden = residual + attention
    return hidden, _llama_rms_norm(hidden, weight)


def bert_embeddings_layernorm(ids: torch.Tensor, token_types: torch.Tensor, word: torch.Tensor,
                              position: torch.Tensor, token_type: torch.Tensor, weight: torch.Tensor,
                              bias: torch.Tensor) -> torch.Tensor:
    """BertEmbeddings: word, token-type and position embeddings summed, then its LayerNorm (eps 1e-12)."""
    where = torch.arange(ids.shape[-1], device=ids.device)
    summed = functional.embedding(ids, word) + functional.embedding(token_types, token_type)
    summed = summed + functional.embedding(where, position)
    return functional.layer_norm(summed, (summed.shape[-1],), weight, bias, eps=1e-12)


def bert_lm_head_gelu_layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """BertForMaskedLM's cls.predictions.transform: gelu (erf form) on the dense output, then LayerNorm (eps 1e-12)."""
    return functional.layer_norm(functional.gelu(x), (x.shape[-1],), weight, bias, eps=1e-12)


# ---- inputs ------------------------------------------------------------------------------------------


def _pick(size: Size, gpu: Any, cpu: Any) -> Any:
    return gpu if size == "gpu" else cpu


def _rows_bytes(table: torch.Tensor, rows: int) -> int:
    """Bytes of `rows` rows of an embedding table: what a lookup reads of it."""
    return rows * table.shape[-1] * table.element_size()


def _embedding_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    batch, tokens, vocabulary, width = _pick(size, (8, 2048, 50304, 2048), (2, 16, 100, 64))
    return (indices((batch, tokens), vocabulary, device, seed=0), random_tensor((vocabulary, width), device, dtype, 1),
            random_tensor((tokens, width), device, dtype, 2))


def _embedding_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    ids, tokens, positions = inputs[:3]
    return (tensor_bytes(ids) + _rows_bytes(tokens, ids.numel()) + _rows_bytes(positions, ids.shape[-1])
            + tensor_bytes(inputs[3:]) + tensor_bytes(outputs))


def _moe_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    tokens, width = _pick(size, (16384, 4096), (32, 64))
    return (random_tensor((tokens, width), device, dtype, 0), indices((2 * tokens,), tokens, device, seed=1),
            random_tensor((2 * tokens,), device, dtype, 2))


def _moe_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    hidden, index, weights = inputs
    return tensor_bytes((index, weights)) + _rows_bytes(hidden, index.numel()) + tensor_bytes(outputs)


def _rotary_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    # Llama 3 8B: 32 query heads, 8 key-value heads of 128
    batch, heads, kv_heads, tokens, width = _pick(size, (4, 32, 8, 2048, 128), (2, 4, 2, 16, 32))
    return (random_tensor((batch, heads, tokens, width), device, dtype, 0),
            random_tensor((batch, kv_heads, tokens, width), device, dtype, 1),
            random_tensor((batch, tokens, width), device, dtype, 2),
            random_tensor((batch, tokens, width), device, dtype, 3))


def _masked_scores(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    batch, heads, tokens = _pick(size, (8, 16, 1024), (2, 4, 16))
    mask = torch.zeros((batch, 1, 1, tokens), device=device, dtype=dtype)
    mask[batch // 2 :, ..., tokens - tokens // 4 :] = torch.finfo(dtype).min  # the later rows end in padding
    return random_tensor((batch, heads, tokens, tokens), device, dtype, 0), mask


def _gpt2_embedding_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    batch, tokens, vocabulary, positions, width = _pick(size, (16, 1024, 50257, 1024, 768), (2, 16, 128, 64, 64))
    return (indices((batch, tokens), vocabulary, device, seed=0), random_tensor((vocabulary, width), device, dtype, 1),
            random_tensor((positions, width), device, dtype, 2), random_tensor((width,), device, dtype, 3),
            random_tensor((width,), device, dtype, 4))


def _llama_embedding_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    batch, tokens, vocabulary, width = _pick(size, (4, 2048, 32000, 4096), (2, 16, 128, 64))
    return (indices((batch, tokens), vocabulary, device, seed=0), random_tensor((vocabulary, width), device, dtype, 1),
            random_tensor((width,), device, dtype, 2))


def _llama_embedding_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    ids, embed, weight = inputs
    return tensor_bytes((ids, weight)) + _rows_bytes(embed, ids.numel()) + tensor_bytes(outputs)


def _bert_embedding_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    batch, tokens, vocabulary, width = _pick(size, (32, 512, 30522, 768), (2, 16, 128, 64))
    token_types = indices((batch, tokens), 2, device, seed=1)
    return (indices((batch, tokens), vocabulary, device, seed=0), token_types,
            random_tensor((vocabulary, width), device, dtype, 2), random_tensor((tokens, width), device, dtype, 3),
            random_tensor((2, width), device, dtype, 4), random_tensor((width,), device, dtype, 5),
            random_tensor((width,), device, dtype, 6))


def _bert_embedding_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    ids, token_types, word = inputs[:3]
    return (tensor_bytes((ids, token_types, *inputs[3:])) + _rows_bytes(word, ids.numel()) + tensor_bytes(outputs))


def _residual_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    shape = _pick(size, (4, 2048, 4096), (2, 16, 64))
    return (random_tensor(shape, device, dtype, 0), random_tensor(shape, device, dtype, 1),
            random_tensor(shape[-1:], device, dtype, 2))


def _stream_inputs(gpu: tuple[int, int], cpu: tuple[int, int]) -> InputFactory:
    """x [rows, width], then weight and bias [width]."""
    return matrices(1, 2, gpu=gpu, cpu=cpu)


# ---- the table -----------------------------------------------------------------------------------------

MODEL_WORKLOADS: tuple[Workload, ...] = (
    Workload("log_softmax_vocabulary", vocabulary_log_softmax, matrices(1, cpu=(2, 17000), gpu=(8192, 50257)),
             "memory", "log_softmax over GPT-2's 50257-token vocabulary: looped rows"),
    Workload("embedding_positions", embedding_positions, _embedding_inputs, "memory",
             "token embedding lookup + position embedding: an indexed load", min_bytes=_embedding_bytes),
    Workload("moe_dispatch_gather", moe_dispatch_gather, _moe_inputs, "memory",
             "index_select of token rows (two experts each) times router weights", min_bytes=_moe_bytes),
    Workload("rotary_embedding", apply_rotary, _rotary_inputs, "memory",
             "q * cos + rotate_half(q) * sin for q and k (transformers' rotate_half: a cat of slices)"),
    Workload("attention_masked_softmax", attention_masked_softmax, _masked_scores, "memory",
             "softmax(scores / 8 + additive padding mask): BERT-style attention probabilities"),
    Workload("bias_residual_layer_norm", bias_residual_layer_norm,
             matrices(2, 3, cpu=(64, 256), gpu=(8192, 4096)),
             "memory", "(x + b + r, layer_norm(x + b + r)): a projection's bias, the residual, the next norm"),
    Workload("swiglu_chunked", swiglu_chunked, matrices(1, cpu=(64, 512), gpu=(8192, 22016)), "memory",
             "silu(gate) * up over the two halves of a fused gate-up projection (Llama 2 7B: 2 x 11008)"),
    Workload("gpt2_embeddings_ln_1", gpt2_embeddings_ln_1, _gpt2_embedding_inputs, "memory",
             "GPT-2 small: wte[ids] + wpe[positions], then h.0.ln_1 (two outputs)", min_bytes=_embedding_bytes),
    Workload("gpt2_mlp_gelu_new", gpt2_mlp_gelu_new, matrices(1, cpu=(64, 256), gpu=(16384, 3072)), "memory",
             "GPT-2 small: mlp.act, the tanh gelu on c_fc's output"),
    Workload("llama_embed_input_layernorm", llama_embed_input_layernorm, _llama_embedding_inputs, "memory",
             "Llama 2 7B: embed_tokens, then layers.0.input_layernorm in float32 (two outputs)",
             min_bytes=_llama_embedding_bytes),
    Workload("llama_residual_post_attention_layernorm", llama_residual_post_attention_layernorm, _residual_inputs,
             "memory", "Llama 2 7B: residual + self_attn output, then post_attention_layernorm (two outputs)"),
    Workload("bert_embeddings_layernorm", bert_embeddings_layernorm, _bert_embedding_inputs, "memory",
             "BERT-base: word + token-type + position embeddings, then embeddings.LayerNorm",
             min_bytes=_bert_embedding_bytes),
    Workload("bert_lm_head_gelu_layernorm", bert_lm_head_gelu_layernorm, _stream_inputs((16384, 768), (64, 256)),
             "memory", "BERT-base: cls.predictions.transform, gelu then LayerNorm"),
)
