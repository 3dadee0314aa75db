"""Recompute, don't store (fusion/recompute.py): a cheap pointwise value one kernel computes and another reads is
computed again by the reader. Checked: which values stay stored in rms_norm's and cross-entropy's backward, that
only the default policy recomputes and a forbidden pair is respected, and that random programs mixing row and
column reductions of shared pointwise values equal eager on fresh inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab.measure.training_workloads import cross_entropy_forward_backward, rms_norm_backward


def _rms_inputs(rows: int = 256, width: int = 512, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    grad, x = (torch.randn(rows, width, generator=gen).to(torch.bfloat16) for _ in range(2))
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    return grad, x, rstd, torch.randn(width, generator=gen).to(torch.bfloat16)


def _full_size_stored(ex: fl.Exploration, numel: int) -> list[str]:
    graph = ex.decomposed.graph
    return [value for g in ex.fused.groups if g.is_kernel for value in g.outputs
            if graph[value].type.numel == numel and value not in graph.outputs]


def test_rms_norm_backward_stores_no_intermediate() -> None:
    inputs = _rms_inputs()
    ex = fl.explore(rms_norm_backward, *inputs)
    # Before: the column-sum kernel wrote x * rstd, grad * w, their product and rstd broadcast, for the row kernel.
    assert _full_size_stored(ex, inputs[0].numel()) == []
    assert any(g.recomputed for g in ex.fused.groups)
    fresh = _rms_inputs(seed=1)
    for mine, theirs in zip(ex(*fresh), rms_norm_backward(*fresh)):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_cross_entropy_backward_reads_the_logits_instead_of_storing_probabilities() -> None:
    logits, targets = torch.randn(4, 3000), torch.randint(0, 3000, (4,))
    ex = fl.explore(cross_entropy_forward_backward, logits, targets)
    assert _full_size_stored(ex, logits.numel()) == []  # only the gradient, a graph output, is [rows, vocabulary]
    fresh, fresh_targets = torch.randn(4, 3000), torch.randint(0, 3000, (4,))
    for mine, theirs in zip(ex(fresh, fresh_targets), cross_entropy_forward_backward(fresh, fresh_targets)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["none", "pointwise"])
def test_only_the_default_policy_recomputes(policy: str) -> None:
    ex = fl.explore(rms_norm_backward, *_rms_inputs(), policy=policy)
    assert not any(g.recomputed for g in ex.fused.groups)


def test_a_forbidden_pair_is_never_recomputed() -> None:
    inputs = _rms_inputs()
    default = fl.explore(rms_norm_backward, *inputs)
    graph = default.decomposed.graph
    value = next(n for g in default.fused.groups for n in g.recomputed if graph[n].kind == "pointwise")
    user = graph.users()[value][0]
    ex = default.with_fusion(forbid=[(value, user)])
    assert value not in {n for g in ex.fused.groups for n in g.recomputed}
    fresh = _rms_inputs(seed=2)
    for mine, theirs in zip(ex(*fresh), rms_norm_backward(*fresh)):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


_UNARY: list[Callable[[torch.Tensor], torch.Tensor]] = [torch.tanh, torch.exp, torch.sigmoid, F.gelu, torch.abs]


def _random_program(seed: int) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    """A pointwise value of two or three inputs (one maybe a row or column vector) used by a column reduction and a
    row reduction, returned with a value derived from both: the shape of a norm's backward."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list) -> Any:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    rows = pick([64, 128, 256])
    width = pick([rows, 128, 384])  # often square
    dtype = pick([torch.float32, torch.bfloat16])
    first, second = pick(_UNARY), pick(_UNARY)
    vector = pick(["row", "column", None])
    column_op, row_op = pick(["sum", "mean", "amax"]), pick(["sum", "mean", "amin"])

    def program(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shared = first(a) * b + (v if vector else 0)
        column = getattr(shared.float(), column_op)(0)
        row = getattr(second(shared) * a, row_op)(-1, keepdim=True)
        return shared * row - a, column

    shapes = {"row": (rows, 1), "column": (width,), None: (1,)}
    inputs = (torch.randn(rows, width, generator=gen).to(dtype), torch.randn(rows, width, generator=gen).to(dtype),
              torch.randn(shapes[vector], generator=gen).to(dtype))
    return program, inputs


def test_random_programs_with_shared_values_match_eager() -> None:
    recomputing = 0
    for seed in range(12):
        program, inputs = _random_program(seed)
        ex = fl.explore(program, *inputs)
        recomputing += any(g.recomputed for g in ex.fused.groups)
        fresh = tuple(torch.randn(t.shape).to(t.dtype) for t in inputs)
        exact = program(*(t.double() for t in fresh))
        for mine, theirs, truth in zip(ex(*fresh), program(*fresh), exact):
            # within twice eager's own error against float64 (bf16 eager rounds every step; fusionlab keeps float32)
            allowed = 2 * (theirs.double() - truth).abs().max().item() + 1e-4
            error = (mine.double() - truth).abs().max().item()
            assert mine.dtype == theirs.dtype and error <= allowed, f"seed {seed}: error {error}, eager's {allowed}"
    assert recomputing >= 4, f"only {recomputing} of 12 programs recomputed a value: the generator misses the pattern"


@pytest.mark.parametrize("sizes", [(3, 5, 4), (5, 5, 5)], ids=["distinct", "square"])
def test_a_transposed_copy_of_reduced_rows_is_recomputed_not_stored(sizes: tuple[int, int, int]) -> None:
    """A copy in another dimension order (`copy(permute(v))`) is read where it lies by a reader of its view only
    when its own kernel can store it at the permuted positions: here `v` is row-shaped, after a reduction, so the
    kernel computing it cannot, and the reader recomputes through the copy instead (it stopped there once, and the
    program failed to build: "sum is read at (1, 0), not at its own row")."""
    n, c, h = sizes

    def fn(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        v = x.sum((2, 3)) + a + b + d
        return torch.softmax(v.t().contiguous().t() + 1, 0)

    args = (torch.randn(n, c, h, h), torch.randn(n, c), torch.randn(n, c), torch.randn(n, c))
    ex = fl.explore(fn, *args)
    torch.testing.assert_close(ex(*args), fn(*args))
    fresh = tuple(torch.randn_like(a) for a in args)
    torch.testing.assert_close(ex(*fresh), fn(*fresh))
