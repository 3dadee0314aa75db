"""Gradients through an explored program: the forward runs fusionlab's kernels, the backward recomputes the user's
function eagerly and differentiates it, so an input that requires grad never gets a silently detached output.

    >>> w = torch.randn(4, requires_grad=True)
    >>> ex = fusionlab.explore(torch.sin, w)
    >>> ex(w).sum().backward()   # w.grad == cos(w)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class _FusedForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, run: Callable[[list[torch.Tensor]], tuple[torch.Tensor, ...]],
                eager: Callable[..., list[torch.Tensor]], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.eager = eager
        ctx.rng = torch.get_rng_state()  # the backward replays the same random draws (dropout)
        ctx.save_for_backward(*tensors)
        outputs = run([t.detach() for t in tensors])
        ctx.mark_non_differentiable(*[o for o in outputs if not (o.dtype.is_floating_point or o.dtype.is_complex)])
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        tensors = ctx.saved_tensors
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        with torch.enable_grad(), torch.random.fork_rng(devices=[]):
            torch.set_rng_state(ctx.rng)
            # Clones: a function that writes its inputs or buffers must not write them a second time.
            outputs = ctx.eager(*[leaf.clone() for leaf in leaves])
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        wanted = [leaf for leaf in leaves if leaf.requires_grad]
        found = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                    allow_unused=True) if pairs and wanted else [None] * len(wanted)
        by_leaf = iter(found)
        return (None, None, *[next(by_leaf) if leaf.requires_grad else None for leaf in leaves])


def run_with_grad(run: Callable[[list[torch.Tensor]], tuple[torch.Tensor, ...]],
                  eager: Callable[..., list[torch.Tensor]],
                  tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """`run(tensors)` with a backward that differentiates `eager(*tensors)`."""
    return _FusedForward.apply(run, eager, *tensors)  # type: ignore[no-any-return]


def needs_grad(tensors: Sequence[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
