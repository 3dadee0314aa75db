"""Sibling reductions (fusion/siblings.py): reductions over the same rows that need nothing of each other share one
kernel. Checked: layer_norm's weight and bias gradients, that a reduction needing another's result is not a sibling,
random programs of sibling reductions against eager, and that only the default policy merges them."""

from __future__ import annotations

from collections.abc import Callable

import torch

import fusionlab as fl
from fusionlab.measure.training_workloads import layer_norm_backward
from fusionlab.measure.workloads import get


def _reduction_kernels(ex: fl.Exploration) -> list[str]:
    return [g.name for g in ex.fused.groups if g.kind == "reduction"]


def test_layer_norm_weight_and_bias_gradients_share_a_kernel() -> None:
    workload = get("layer_norm_backward")
    _, inputs = workload.build("cpu")
    ex = fl.explore(layer_norm_backward, *inputs)
    assert len(_reduction_kernels(ex)) == 2, ex.fused.as_text()  # the row kernel, and both column sums
    assert any(d.reason.startswith("siblings") for d in ex.fused.decisions)
    fresh = workload.fresh_inputs("cpu")
    for mine, theirs in zip(ex(*fresh), layer_norm_backward(*fresh)):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    assert len(_reduction_kernels(fl.explore(layer_norm_backward, *inputs, policy="pointwise"))) > 2


def test_a_reduction_of_anothers_result_is_no_sibling() -> None:
    fn = lambda x, y: ((x * y).sum(0), (x - x.sum(0)).amax(0))  # noqa: E731  (the second needs x.sum(0) first)
    x, y = torch.randn(300, 64), torch.randn(300, 64)
    ex = fl.explore(fn, x, y)
    fresh = torch.randn(300, 64), torch.randn(300, 64)
    for mine, theirs in zip(ex(*fresh), fn(*fresh)):
        torch.testing.assert_close(mine, theirs)


def _siblings(ops: list[str], axis: int) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return getattr(a * b, ops[0])(axis), getattr(torch.tanh(a), ops[1])(axis), getattr(b + 1, ops[2])(axis)

    return fn


def test_random_sibling_reductions_match_eager() -> None:
    merged = 0
    for seed in range(10):
        gen = torch.Generator().manual_seed(seed)
        rows, width = (int(v) for v in torch.randint(2, 300, (2,), generator=gen))
        axis = int(torch.randint(0, 2, (1,), generator=gen))
        fn = _siblings([("sum", "amax", "mean", "amin")[int(i)] for i in torch.randint(0, 4, (3,), generator=gen)],
                       axis)
        inputs = torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)
        ex = fl.explore(fn, *inputs)
        merged += len(_reduction_kernels(ex)) == 1
        fresh = torch.randn(rows, width), torch.randn(rows, width)
        for mine, theirs in zip(ex(*fresh), fn(*fresh)):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5, msg=f"seed {seed}")
    assert merged >= 8, f"only {merged} of 10 programs merged their three sibling reductions"


def test_at_most_four_sibling_reductions_share_a_kernel() -> None:
    """Siblings merge pairwise and the merging repeats: twelve column sums over the same rows (a transformer's layer
    norms' weight and bias gradients) would all become one kernel, which Triton's compiler does not finish at
    BERT's size. A merged kernel holds at most `siblings.MAX_REDUCTIONS` of them, and every sum is right."""
    from fusionlab.fusion.siblings import MAX_REDUCTIONS

    def sums(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t.sum(0) for t in tensors)

    tensors = [torch.randn(32, 16) for _ in range(12)]
    ex = fl.explore(sums, *tensors)
    graph = ex.decomposed.graph
    counts = [sum(1 for n in g.nodes if graph[n].kind == "reduction") for g in ex.fused.groups]
    assert max(counts) == MAX_REDUCTIONS and sum(counts) == 12, counts
    for got, want in zip(ex(*tensors), sums(*tensors), strict=True):
        torch.testing.assert_close(got, want)
