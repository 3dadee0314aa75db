"""Reshapes moved across pointwise ops (decompose/reshape_moves.py): a causal LM's loss upcasts and flattens its
logits, and its backward reshapes and downcasts the gradient; each cast now joins the log-softmax kernel instead of
a kernel of its own. Checked: the kernels each program becomes, and that every program equals eager on fresh
random inputs, with the moves and without them (shared values, broadcasts, outputs that are the reshape)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fusionlab as fl
from fusionlab.decompose.reshape_moves import move_reshapes


def _kernels(ex: fl.Exploration) -> list[str]:
    return [g.name for g in ex.fused.groups if g.is_kernel]


def _loss_forward(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float().view(-1, logits.shape[-1]), -1)


def _loss_backward(grad: torch.Tensor, log_probabilities: torch.Tensor) -> torch.Tensor:
    flat = grad - torch.exp(log_probabilities) * grad.sum(-1, keepdim=True)
    return flat.view(2, 16, -1).to(torch.bfloat16)


def test_an_upcast_fuses_into_the_log_softmax_of_its_flattened_logits() -> None:
    logits = torch.randn(2, 16, 96, dtype=torch.bfloat16)
    ex = fl.explore(_loss_forward, logits)
    kernels = _kernels(ex)
    assert len(kernels) == 1 and kernels[0].startswith("reduction") and "cast" in kernels[0], kernels
    fresh = torch.randn(2, 16, 96, dtype=torch.bfloat16)
    torch.testing.assert_close(ex(fresh), _loss_forward(fresh), rtol=1e-5, atol=1e-5)


def test_a_downcast_after_a_reshape_joins_the_kernel_that_computes_it() -> None:
    grad, log_probabilities = torch.randn(32, 96), torch.log_softmax(torch.randn(32, 96), -1)
    ex = fl.explore(_loss_backward, grad, log_probabilities)
    kernels = _kernels(ex)
    assert len(kernels) == 1 and "cast" in kernels[0], kernels
    fresh = torch.randn(32, 96), torch.log_softmax(torch.randn(32, 96), -1)
    actual = ex(*fresh)
    assert actual.dtype == torch.bfloat16 and actual.shape == (2, 16, 96)
    torch.testing.assert_close(actual, _loss_backward(*fresh), rtol=1e-2, atol=1e-2)


# name: (function, input shapes, kernels with the moves): a case that cannot move says why beside it
CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[tuple[int, ...], ...], int]] = {
    # up: the ops above the reshape read inputs only
    "cast_then_flatten_then_sum": (lambda x: (x.float() * 2).reshape(-1, 8).sum(-1), ((4, 6, 8),), 1),
    "broadcast_scalar_then_split": (lambda x, s: (x * s).reshape(4, 2, 3, 8).sum((1, 3)), ((8, 3, 8), ()), 1),
    # a row broadcast across the dims a reshape merges has no broadcast at the new shape: it stays
    "broadcast_row_then_flatten": (lambda x, b: (x + b).reshape(24, 8).amax(-1), ((4, 6, 8), (6, 1)), 2),
    # a value read twice stays where it is (it is written once, read by both)
    "shared_value": (lambda x: torch.cat([(x * 3).reshape(-1, 8).sum(-1), (x * 3).sum((0, 1))]), ((4, 6, 8),), 3),
    "the_reshape_is_an_output": (lambda x: (x.exp() + 1).reshape(6, 16), ((4, 3, 8),), 1),
    # down: the reshaped value is computed by a kernel
    "softmax_then_unflatten_then_cast": (lambda x: torch.softmax(x, -1).view(2, 3, 8).half(), ((6, 8),), 1),
    "chain_of_two_after_a_reshape": (lambda x: ((x * 2).sum(-1, keepdim=True) * x).view(4, 30).neg().exp(),
                                     ((8, 15),), 1),
    "square_shapes": (lambda x: (x - x.mean(-1, keepdim=True)).view(8, 8, 8).abs().view(64, 8).sum(0),
                      ((64, 8),), 2),
    # a value in memory beside the reshape (a backward's incoming gradient) is read through a view of it, dense
    # or strided
    "softmax_then_unflatten_plus_an_input": (lambda x, t: torch.softmax(x, -1).view(2, 3, 8) + t,
                                             ((6, 8), (2, 3, 8)), 1),
    "softmax_then_unflatten_plus_a_transposed_input": (lambda x, t: torch.softmax(x, -1).view(2, 3, 8) + t.mT,
                                                       ((6, 8), (2, 8, 3)), 2),
    # the scale's rows are not the sum's rows at its own shape: it stays
    "sum_then_unflatten_then_scale": (lambda x, s: x.sum(-1).view(3, 4) * s, ((12, 5), (3, 1)), 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_moved_programs_match_eager(case: str) -> None:
    fn, shapes, kernels = CASES[case]
    example = [torch.randn(shape) for shape in shapes]
    ex = fl.explore(fn, *example)
    assert len(_kernels(ex)) == kernels, (_kernels(ex), ex.decomposed.as_text())
    fresh = [torch.randn(shape) for shape in shapes]
    torch.testing.assert_close(ex(*fresh), fn(*fresh), rtol=1e-4, atol=1e-4)
    assert ex.verify().ok


def test_the_moves_keep_the_program_and_remove_only_copies() -> None:
    ex = fl.explore(_loss_forward, torch.randn(2, 16, 96, dtype=torch.bfloat16))
    graph = ex.decomposed.graph
    assert move_reshapes(graph) is graph  # already moved: nothing left to move
    reshapes = [n for n in graph.nodes if n.op == "reshape"]
    assert [graph[n.inputs[0]].kind for n in reshapes] == ["input"], ex.decomposed.as_text()


def test_a_shared_cast_is_not_computed_twice() -> None:
    ex = fl.explore(lambda x: (x.float().view(-1, 8).sum(-1), x.float() * 2), torch.randn(4, 6, 8,
                                                                                         dtype=torch.bfloat16))
    casts = [n for n in ex.decomposed.graph.nodes if n.op == "cast"]
    assert len(casts) == 1, ex.decomposed.as_text()


def test_the_loss_gradient_plus_the_incoming_logits_gradient_is_one_kernel() -> None:
    # a causal LM returns its logits beside the loss: the backward adds their incoming gradient to the loss's,
    # `add(dlogits, reshape(g))`; the add moves above the reshape and joins the log-softmax backward's kernel
    # instead of a kernel that reads and writes the whole bf16 [batch, tokens, vocabulary] table once more
    def backward(grad: torch.Tensor, log_probabilities: torch.Tensor, incoming: torch.Tensor) -> torch.Tensor:
        flat = grad - torch.exp(log_probabilities) * grad.sum(-1, keepdim=True)
        return incoming + flat.to(torch.bfloat16).view(incoming.shape)

    def example() -> tuple[torch.Tensor, ...]:
        return (torch.randn(32, 96), torch.log_softmax(torch.randn(32, 96), -1),
                torch.randn(2, 16, 96, dtype=torch.bfloat16))

    ex = fl.explore(backward, *example())
    kernels = _kernels(ex)
    assert len(kernels) == 1 and kernels[0].startswith("reduction") and "add" in kernels[0], kernels
    for strided in (False, True):
        fresh = list(example())
        if strided:  # an incoming gradient of other strides than the example's
            fresh[2] = torch.randn(2, 96, 16, dtype=torch.bfloat16).mT
        torch.testing.assert_close(ex(*fresh), backward(*fresh), rtol=1e-2, atol=1e-2)
