"""Models outside the zoo, as users bring them: transformers architectures built from small configs, a training
step through `torch.compile(backend="fusionlab")` against eager.

Each loss and gradient is compared with a float64 run of the same model: fusionlab's error must stay within a few
times eager's own float32 error. A fixed bound would not do: at batch 2, MobileNetV2's batch norms over 1x1 maps
divide by the spread of two values, and eager's float32 gradients already part from float64's by 2.5e-4 of their
largest (Inductor's 2.7e-4, fusionlab's 3.5e-4)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fusionlab import dynamo_backend, models

transformers = pytest.importorskip("transformers")


def _images(config: Any) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=generator),
            "labels": torch.randint(0, config.num_labels, (2,), generator=generator)}


def _tokens(config: Any, classes: int | None = None) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=generator)
    labels = ids.clone() if classes is None else torch.randint(0, classes, (2,), generator=generator)
    return {"input_ids": ids, "labels": labels}


def _mobilenet_v2() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.MobileNetV2Config(image_size=32, num_labels=10, depth_multiplier=0.35,
                                            classifier_dropout_prob=0.0)
    return transformers.MobileNetV2ForImageClassification(config), _images(config)


def _convnext() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=10)
    return transformers.ConvNextForImageClassification(config), _images(config)


def _swin() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                     window_size=4, num_labels=10, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
    return transformers.SwinForImageClassification(config), _images(config)


def _distilbert() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                           max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                                           seq_classif_dropout=0.0)
    return transformers.DistilBertForSequenceClassification(config), _tokens(config, classes=2)


def _t5() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0, dropout_rate=0.0)
    return transformers.T5ForConditionalGeneration(config), _tokens(config)


def _qwen2() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    return transformers.Qwen2ForCausalLM(config), _tokens(config)


def _gpt_neo() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.GPTNeoConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                       attention_types=[[["global", "local"], 1]], window_size=8,
                                       max_position_embeddings=32, embed_dropout=0.0, attention_dropout=0.0,
                                       resid_dropout=0.0)
    return transformers.GPTNeoForCausalLM(config), _tokens(config)


def _bloom() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.0,
                                      attention_dropout=0.0)
    return transformers.BloomForCausalLM(config), _tokens(config)


def _gptj() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.GPTJConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPTJForCausalLM(config), _tokens(config)


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]] = {
    "mobilenet_v2": _mobilenet_v2,  # ReLU6's backward; a 3x3 gradient cropped to 1x1 by a negative padding
    "convnext": _convnext,  # depthwise 7x7 convolutions, layer norm over channels-last permutes, layer scale
    "swin": _swin,  # shifted windows: roll, window partition views, relative position bias gathered
    "distilbert": _distilbert,  # sequence classification: the first token's row, a 2-class cross-entropy
    "t5": _t5,  # encoder-decoder, relative position buckets, RMS-style norm without mean, tied embedding rescale
    "qwen2": _qwen2,  # grouped-query attention with biases on q, k, v
    "gpt_neo": _gpt_neo,  # alternating global and local (windowed) causal attention
    "bloom": _bloom,  # ALiBi: slopes pow(full(base), arange(heads)) times positions, baddbmm'd into the scores
    "gptj": _gptj,  # rotary on the first dims only, interleaved pairs (every other element)
}


def _nonzero(model: torch.nn.Module) -> None:
    """Zero-initialised parameters (heads, layer scales) get small random values: a zero would make a check vacuous."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


def _errors(got: dict[str, torch.Tensor], exact: dict[str, torch.Tensor], scale: float) -> dict[str, float]:
    """Each tensor's max error against float64's, over its largest value (or over 1e-3 of `scale`, the largest
    gradient of all: a gradient that is zero in exact arithmetic is rounding noise in every run)."""
    return {name: (got[name].double() - want).abs().max().item() / max(want.abs().max().item(), 1e-3 * scale, 1e-30)
            for name, want in exact.items()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_backend_training_step_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model, inputs = MODELS[name]()
    _nonzero(model)
    model.train()
    exact_model = copy.deepcopy(model).double()
    exact_inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    exact_loss, exact_grads = models.train_step(exact_model, dict(exact_model.named_parameters()), exact_inputs)
    parameters = dict(model.named_parameters())
    loss, grads = models.train_step(model, parameters, inputs)
    before = dynamo_backend.mark()
    our_loss, our_grads = models.train_step(torch.compile(model, backend="fusionlab"), parameters, inputs)
    assert any(g.role == "backward" and g.exploration.fused.kernels for g in dynamo_backend.since(before)), \
        "no backward graph ran through fusionlab's kernels"
    assert our_grads.keys() == grads.keys() == exact_grads.keys(), "a parameter has no gradient"
    scale = max(g.abs().max().item() for g in exact_grads.values())
    exact = {"loss": exact_loss, **exact_grads}
    eager = _errors({"loss": loss, **grads}, exact, scale)
    ours = _errors({"loss": our_loss, **our_grads}, exact, scale)
    for key in exact:
        assert ours[key] <= 3 * eager[key] + 1e-6, f"{key}: error {ours[key]:.3g}, eager's {eager[key]:.3g}"
