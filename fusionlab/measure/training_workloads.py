"""Workloads a training step produces: a loss over a vocabulary, backward kernels, split reductions, an optimizer step.

Each is written as a model's training graph computes it (the backward ops are the aten ops AOTAutograd's backward
graph calls, with the statistics the forward saved as inputs), at a real model's shape on the GPU (bf16) and a
tiny one on a CPU. Rows longer than 16384 elements take the looped-reduction path, so the CPU sizes of the
long-row workloads keep rows that long.

    >>> fn, (logits, targets) = TRAINING_WORKLOADS[1].build("gpu", "meta")   # cross_entropy_128k
    >>> tuple(logits.shape), targets.dtype
    ((4096, 128256), torch.int64)
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

__all__ = ["TRAINING_WORKLOADS", "adamw_step", "column_mean_var", "cross_entropy", "cross_entropy_forward_backward",
           "gelu_backward", "layer_norm_backward", "rms_norm_backward", "softmax_backward",
           "sum_leading_axes"]

aten = torch.ops.aten

# ---- losses over a vocabulary --------------------------------------------------------------------------


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean loss of next-token prediction: log_softmax over the vocabulary, the target's entry, a mean."""
    return functional.cross_entropy(logits, targets)


def cross_entropy_forward_backward(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss and its gradient with respect to the logits, as the forward and backward graphs compute them:
    grad = (softmax(logits) - one_hot(targets)) / rows, reached through log_softmax's saved output."""
    log_probabilities = aten._log_softmax(logits, 1, False)
    loss, total_weight = aten.nll_loss_forward(log_probabilities, targets, None, 1, -100)
    grad_log_probabilities = aten.nll_loss_backward(torch.ones_like(loss), log_probabilities, targets, None, 1, -100,
                                                    total_weight)
    return loss, aten._log_softmax_backward_data(grad_log_probabilities, log_probabilities, 1, logits.dtype)


def _vocabulary(gpu: tuple[int, int], cpu: tuple[int, int]) -> InputFactory:
    """Logits [rows, vocabulary] and one target per row; the targets span the whole vocabulary (the first is 0, the
    last vocabulary - 1), so fresh inputs drawn like them do too."""

    def make(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
        rows, vocabulary = gpu if size == "gpu" else cpu
        targets = indices((rows,), vocabulary, device, seed=1)
        if targets.device.type != "meta":
            targets[0], targets[-1] = 0, vocabulary - 1
        return random_tensor((rows, vocabulary), device, dtype, seed=0), targets

    return make


# ---- backward kernels ----------------------------------------------------------------------------------


def layer_norm_backward(grad: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                        weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of layer_norm's input (a reduction along each row), weight and bias (reductions down the
    columns: over the leading axis of a tall matrix)."""
    result = aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd, weight, bias, [True, True, True])
    return result[0], result[1], result[2]


def rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                      weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of x * rstd * weight (rstd = rsqrt(mean(x^2) + eps), saved by the forward) with respect to x
    (a row reduction) and the weight (a column reduction), as the decomposed backward graph computes them."""
    normalized = x * rstd
    grad_weight = (grad * normalized).sum(dim=0)
    scaled = grad * weight
    grad_x = rstd * (scaled - normalized * (scaled * normalized).mean(dim=-1, keepdim=True))
    return grad_x, grad_weight


def softmax_backward(grad: torch.Tensor, probabilities: torch.Tensor) -> torch.Tensor:
    """Softmax's backward over attention probabilities: p * (grad - sum(grad * p)) along each row."""
    return aten._softmax_backward_data(grad, probabilities, -1, probabilities.dtype)


def gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """gelu's (erf form) backward in an MLP: grad * (cdf(x) + x * pdf(x)); pointwise, two inputs."""
    return aten.gelu_backward(grad, x)


def _normalization_statistics(rms: bool, gpu: tuple[int, int], cpu: tuple[int, int]) -> InputFactory:
    """grad and x [rows, width], the statistics the forward saved ([rows, 1]: mean and rstd, or rstd: float32 as
    transformers' RMS norm computes it), then the weight (and the bias of a layer norm)."""

    def make(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
        shape = gpu if size == "gpu" else cpu
        grad, x = random_tensor(shape, device, dtype, seed=0), random_tensor(shape, device, dtype, seed=1)
        wide = x.float()
        if rms:
            rstd = torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
            return grad, x, rstd, random_tensor(shape[-1:], device, dtype, seed=2)
        variance, mean = torch.var_mean(wide, dim=-1, correction=0, keepdim=True)
        # native_layer_norm saves float32 statistics of half-precision input on CUDA, but its own dtype on a CPU
        # (whose backward then refuses float32 ones).
        saved = torch.float32 if torch.device(device).type == "cuda" else dtype
        weights = (random_tensor(shape[-1:], device, dtype, seed=2), random_tensor(shape[-1:], device, dtype, seed=3))
        return grad, x, mean.to(saved), torch.rsqrt(variance + 1e-5).to(saved), *weights

    return make


def _softmax_pair(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    """The gradient and the probabilities of attention softmax [batch * heads, queries, keys]."""
    shape = (64, 1024, 1024) if size == "gpu" else (4, 16, 64)
    return random_tensor(shape, device, dtype, seed=0), torch.softmax(random_tensor(shape, device, dtype, seed=1), -1)


# ---- an optimizer step ---------------------------------------------------------------------------------

_ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "step": 10}


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
               exp_avg_sq: torch.Tensor) -> torch.Tensor:
    """One AdamW step over one flat tensor, as torch.optim.AdamW's single-tensor path writes it: param, exp_avg and
    exp_avg_sq are updated in place (three outputs written back); returns the parameter."""
    lr, beta1, beta2, step = _ADAMW["lr"], _ADAMW["beta1"], _ADAMW["beta2"], _ADAMW["step"]
    param.mul_(1 - lr * _ADAMW["weight_decay"])
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    correction1, correction2 = 1 - beta1**step, 1 - beta2**step
    denominator = (exp_avg_sq.sqrt() / math.sqrt(correction2)).add_(_ADAMW["eps"])
    param.addcdiv_(exp_avg, denominator, value=-lr / correction1)
    return param


def _adamw_inputs(size: Size, device: DeviceLike, dtype: torch.dtype) -> tuple[Any, ...]:
    shape = (64 * 1024 * 1024,) if size == "gpu" else (4096,)
    param, grad, exp_avg = (random_tensor(shape, device, dtype, seed=i) for i in range(3))
    return param, grad, exp_avg, random_tensor(shape, device, dtype, seed=3).abs()


def _adamw_bytes(inputs: tuple[Any, ...], outputs: Any) -> int:
    # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq (the returned param is one of them)
    return tensor_bytes(inputs) + 3 * tensor_bytes(inputs[0])


# ---- split reductions: over the leading axis of a tall matrix ----------------------------------------


def column_mean_var(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and (biased) variance of every column of a tall matrix: batch norm's statistics, or a feature
    normaliser's; 64 rows per column on the GPU would starve a one-program-per-column kernel."""
    variance, mean = torch.var_mean(x, dim=0, correction=0)
    return mean, variance


def sum_leading_axes(x: torch.Tensor) -> torch.Tensor:
    """A linear layer's bias gradient: the output gradient [batch, tokens, width] summed over batch and tokens."""
    return x.sum(dim=(0, 1))


# ---- the table ---------------------------------------------------------------------------------------

TRAINING_WORKLOADS: tuple[Workload, ...] = (
    Workload("cross_entropy_32k", cross_entropy, _vocabulary(gpu=(8192, 32000), cpu=(8, 1000)), "memory",
             "cross-entropy over a 32000-token vocabulary (Llama 2), 8192 tokens"),
    Workload("cross_entropy_128k", cross_entropy, _vocabulary(gpu=(4096, 128256), cpu=(2, 20000)), "memory",
             "cross-entropy over a 128256-token vocabulary (Llama 3), 4096 tokens: looped rows"),
    Workload("cross_entropy_256k", cross_entropy, _vocabulary(gpu=(2048, 256000), cpu=(2, 33000)), "memory",
             "cross-entropy over a 256000-token vocabulary (Gemma), 2048 tokens: looped rows"),
    Workload("cross_entropy_backward", cross_entropy_forward_backward,
             _vocabulary(gpu=(4096, 128256), cpu=(2, 20000)), "memory",
             "cross-entropy and its gradient over a 128256-token vocabulary: (loss, softmax - one_hot)"),
    Workload("layer_norm_backward", layer_norm_backward,
             _normalization_statistics(False, gpu=(8192, 4096), cpu=(64, 256)), "memory",
             "layer_norm's backward: grad of x (rows), weight and bias (columns)"),
    Workload("rms_norm_backward", rms_norm_backward,
             _normalization_statistics(True, gpu=(8192, 4096), cpu=(64, 256)), "memory",
             "rms_norm's backward: grad of x (rows) and weight (columns)"),
    Workload("softmax_backward", softmax_backward, _softmax_pair, "memory",
             "attention softmax's backward: p * (g - sum(g * p))"),
    Workload("gelu_backward", gelu_backward, matrices(2, cpu=(64, 256), gpu=(8192, 16384)), "memory",
             "gelu's backward in an MLP (erf form)"),
    Workload("adamw_step", adamw_step, _adamw_inputs, "memory",
             "AdamW step on 64 M parameters: param, exp_avg, exp_avg_sq updated in place",
             min_bytes=_adamw_bytes),
    Workload("column_mean_var", column_mean_var, matrices(1, cpu=(512, 32), gpu=(65536, 1024)), "memory",
             "mean and variance of each column of a tall 65536 x 1024 matrix (over axis 0)"),
    Workload("sum_leading_axes", sum_leading_axes, matrices(1, cpu=(4, 64, 32), gpu=(16, 4096, 1024)), "memory",
             "bias gradient: sum over batch and tokens of a 16 x 4096 x 1024 gradient"),
)

