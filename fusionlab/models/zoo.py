"""The model zoo: each entry builds a transformers model from a config, at a tiny size and at the size users run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ModelSpec", "build", "loss_of", "names", "spec", "train_step"]

Inputs = dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One zoo entry: how to build the model and its inputs at one size."""

    name: str
    description: str
    #: size -> (config keyword arguments, batch, sequence length or image side)
    sizes: dict[str, tuple[dict[str, Any], int, int]]
    make: Callable[[dict[str, Any], bool], torch.nn.Module]
    inputs: Callable[[Any, int, int, bool, torch.Generator], Inputs]
    #: the config attributes that hold dropout probabilities
    dropout_keys: tuple[str, ...] = ()


def _text_inputs(config: Any, batch: int, length: int, train: bool, gen: torch.Generator, *,
                 padded: bool = False, labels: str = "tokens") -> Inputs:
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=gen)
    inputs: Inputs = {"input_ids": ids}
    if padded:  # the last rows end in padding, so the attention mask has work to do
        mask = torch.ones(batch, length, dtype=torch.long)
        for row in range(batch // 2, batch):
            mask[row, length - 1 - row % max(length // 4, 1):] = 0
        inputs["attention_mask"] = mask
    if train:
        inputs["labels"] = ids.clone()
    return inputs


def _image_inputs(config: Any, batch: int, side: int, train: bool, gen: torch.Generator) -> Inputs:
    inputs: Inputs = {"pixel_values": torch.randn(batch, 3, side, side, generator=gen)}
    if train:
        inputs["labels"] = torch.randint(0, config.num_labels, (batch,), generator=gen)
    return inputs


def _gpt2(kwargs: dict[str, Any], train: bool) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(**kwargs))


def _llama(kwargs: dict[str, Any], train: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(**kwargs))


def _bert(kwargs: dict[str, Any], train: bool) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM
    return BertForMaskedLM(BertConfig(**kwargs))


def _resnet(kwargs: dict[str, Any], train: bool) -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification
    return ResNetForImageClassification(ResNetConfig(**kwargs))


def _vit(kwargs: dict[str, Any], train: bool) -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification
    return ViTForImageClassification(ViTConfig(**kwargs))


_ZOO: dict[str, ModelSpec] = {spec.name: spec for spec in [
    ModelSpec("bert", "BERT (masked LM) with a padded attention mask; gpu: BERT-base 16x256", {
        "tiny": (dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64), 2, 16),
        "gpu": (dict(), 16, 256),
    }, _bert, lambda c, b, n, t, g: _text_inputs(c, b, n, t, g, padded=True),
        ("hidden_dropout_prob", "attention_probs_dropout_prob")),
    ModelSpec("gpt2", "GPT-2 (LM head); gpu: GPT-2 small 8x512", {
        "tiny": (dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                      eos_token_id=0), 2, 16),
        "gpu": (dict(), 8, 512),
    }, _gpt2, _text_inputs, ("resid_pdrop", "embd_pdrop", "attn_pdrop")),
    ModelSpec("llama", "Llama-family decoder (causal LM, grouped-query attention); gpu: ~0.2 B parameters 4x1024", {
        "tiny": (dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64), 2, 16),
        "gpu": (dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                     num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048), 4, 1024),
    }, _llama, _text_inputs, ("attention_dropout",)),
    ModelSpec("resnet50", "ResNet (bottleneck blocks, batch norm); gpu: ResNet-50, 224x224 images x32", {
        "tiny": (dict(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], layer_type="bottleneck",
                      num_labels=10), 2, 32),
        "gpu": (dict(num_labels=1000), 32, 224),
    }, _resnet, _image_inputs),
    ModelSpec("vit", "Vision Transformer; gpu: ViT-B/16, 224x224 images x32", {
        "tiny": (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      image_size=32, patch_size=8, num_labels=10), 2, 32),
        "gpu": (dict(num_labels=1000), 32, 224),
    }, _vit, _image_inputs, ("hidden_dropout_prob", "attention_probs_dropout_prob")),
]}


def names() -> list[str]:
    """The zoo's model names, sorted."""
    return sorted(_ZOO)


def spec(name: str) -> ModelSpec:
    """The zoo entry called `name`."""
    try:
        return _ZOO[name]
    except KeyError:
        raise ValueError(f"no model {name!r} in the zoo: choose one of {names()}") from None


def build(name: str, size: str = "tiny", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          train: bool = False, dropout: float | None = 0.0, seed: int = 0) -> tuple[torch.nn.Module, Inputs]:
    """Build zoo model `name` at `size` ("tiny" or "gpu") with random weights, and inputs for it.

    Returns `(model, inputs)`, called as `model(**inputs)`. `train=True` puts the model in train mode and adds
    `labels`, so `model(**inputs).loss` is a training loss. `dropout=0.0` (the default) turns dropout off, so a
    train-mode call is deterministic and comparable with eager; `dropout=None` keeps the config's own
    probabilities. Weights come from `seed`; every parameter is non-zero (some are zero-initialised by the config).
    """
    entry = spec(name)
    if size not in entry.sizes:
        raise ValueError(f"size {size!r} is not one of {sorted(entry.sizes)} for model {name!r}")
    kwargs, batch, length = entry.sizes[size]
    kwargs = dict(kwargs)
    if dropout is not None:
        kwargs.update({key: dropout for key in entry.dropout_keys})
    torch.manual_seed(seed)
    model = entry.make(kwargs, train)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in model.parameters():
            if not param.any():  # zero-initialised (biases, some heads): a check against it would be vacuous
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    model.train(train)
    inputs = entry.inputs(model.config, batch, length, train, gen)  # type: ignore[operator]
    model = model.to(device=device, dtype=dtype)
    inputs = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in inputs.items()}
    return model, inputs


def loss_of(output: Any) -> torch.Tensor:
    """The scalar loss of a model's output: `.loss` of a transformers output, else the mean of the first tensor."""
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss  # type: ignore[no-any-return]
    first = output[0] if isinstance(output, (tuple, list)) else getattr(output, "logits", output)
    return first.float().mean()  # type: ignore[no-any-return]


def train_step(model: Callable[..., Any], parameters: dict[str, torch.nn.Parameter], inputs: Inputs
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward and backward pass: the loss and every parameter's gradient (by name), gradients cleared first."""
    for param in parameters.values():
        param.grad = None
    loss = loss_of(model(**inputs))
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in parameters.items() if p.grad is not None}
    return loss.detach(), grads
