"""The decompositions capture applies: aten ops fusionlab has no rule of its own for, written by PyTorch's own
decompositions (`torch._decomp`, the ones Inductor starts from) as ops it has rules for, so they become fused
kernels instead of extern (eager) calls.

The table is curated, not PyTorch's whole list: only the ops below are decomposed, so every op fusionlab already
has a rule for (layer norm's forward, softmax, gelu, var_mean, ...) is captured as before. Each node a
decomposition makes keeps its origin in `node.meta["original_aten"]` (as torch.export's nodes do), and
`decomposed_from(node)` names it.

    >>> torch.ops.aten.native_layer_norm_backward.default in DECOMPOSITIONS
    True
    >>> torch.ops.aten.convolution_backward.default in DECOMPOSITIONS  # deliberately an extern op: cuDNN
    False

The ops the decompositions write (gather, the one-hot scatter, full, arange, new_zeros, slice_scatter, ...) have
rules of their own (`decompose/rules/indexing.py`, `factories.py`); one a rule cannot take (a scatter that is not
one-hot) runs as an extern op between the kernels, and its reason names the op it was decomposed from.

The table is `torch._decomp`'s, not `torch._inductor.decomposition`'s: importing Inductor's pulls in its config and
Dynamo, and its one override among these ops (`_softmax_backward_data`) writes Inductor's own `inductor_prims.fma`.
Dropout and other random ops are never decomposed: they run in eager PyTorch in program order, so from one seed they
draw what eager draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

# Op names, grouped by what they are; an op this torch lacks is skipped (getattr), so one table serves torch 2.11
# and 2.13. Ops left out on purpose (products, convolutions, attention, pooling windows, embedding's backward, random
# ops) are extern ops with a reason: `decompose/apply.py`'s DELIBERATE_EXTERNS.
DECOMPOSED_OPS: dict[str, tuple[str, ...]] = {
    # Batch norm in every form capture meets: eval (no_training), train with running-stat updates (the functional
    # form returns the new statistics; the in-place forms write them with copy_, which capture turns into the
    # buffers' returned mutations), the cuDNN/MIOpen forms make_fx picks on a GPU, and the backward.
    "batch norm": ("_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
                   "_native_batch_norm_legit_functional", "native_batch_norm", "cudnn_batch_norm",
                   "miopen_batch_norm", "native_batch_norm_backward", "batch_norm_backward",
                   "cudnn_batch_norm_backward", "miopen_batch_norm_backward"),
    # Softmax whose fully masked rows give 0, not NaN (scaled_dot_product_attention's math path, torch >= 2.5).
    "softmax": ("_safe_softmax",),
    # The backward of the normalisations and softmaxes fusionlab decomposes forward.
    "normalization backward": ("native_layer_norm_backward", "_fused_rms_norm_backward", "_softmax_backward_data",
                               "_log_softmax_backward_data"),
    # The backward of the activations fusionlab decomposes forward: pointwise chains.
    "activation backward": ("threshold_backward", "gelu_backward", "silu_backward", "tanh_backward",
                            "sigmoid_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
                            "softplus_backward", "hardsigmoid_backward", "hardswish_backward", "mish_backward"),
    # Cross entropy's negative log likelihood: a gather and a (weighted) mean forward, a scatter backward.
    "loss": ("nll_loss_forward", "nll_loss_backward"),
    # The gradient of a slice or select: zeros with the gradient written into the slice (slice_scatter).
    "view backward": ("slice_backward", "select_backward"),
}


def _overloads(names: tuple[str, ...]) -> list[Any]:
    return [packet for name in names if (packet := getattr(aten, name, None)) is not None]


#: {aten overload: PyTorch's decomposition}, what capture's make_fx call applies
DECOMPOSITIONS: dict[Any, Callable[..., Any]] = get_decompositions(
    [packet for names in DECOMPOSED_OPS.values() for packet in _overloads(names)])


def decomposed_from(node: torch.fx.Node) -> str | None:
    """The aten op whose decomposition made `node` ("aten.native_layer_norm_backward"), or None for a node the
    traced function called itself."""
    origin = node.meta.get("original_aten")  # a copy of the overload (fx copies meta fields): compared by name
    name = str(origin) if origin is not None else None
    if name is None or name == str(node.target) or name not in _DECOMPOSED_NAMES:
        return None
    return name.rsplit(".", 1)[0]


_DECOMPOSED_NAMES = frozenset(str(op) for op in DECOMPOSITIONS)


__all__ = ["DECOMPOSED_OPS", "DECOMPOSITIONS", "decomposed_from"]
