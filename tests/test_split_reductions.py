"""Split reductions (decompose/split.py): a reduction too narrow to fill a GPU is written as a partial reduction and
a reduction of the partial values. Checked: when it splits, and that the split program equals eager on fresh random
inputs for each reducing op, dtype, layout and keepdim, batch norm forward and backward included."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.decompose.split import SplitPlan, plan_split


@pytest.mark.parametrize(("shape", "axes", "expected"), [
    ((32, 64, 112, 112), (0, 2, 3), SplitPlan((32, 64, 112, 112), (2, 3), (0,))),  # batch norm: (H, W) first
    ((1 << 20,), (0,), SplitPlan((256, 4096), (1,), (0,))),  # a whole sum: 256 rows of 4096
    ((1024, 1024), (0, 1), SplitPlan((256, 4096), (1,), (0,))),
    ((65536, 64), (0,), SplitPlan((64, 1024, 64), (1,), (0,))),  # a column sum of a tall matrix
    ((4096, 768), (0,), None),  # a bias gradient: 48 programs, each quick
    ((32, 2048, 7, 7), (0, 2, 3), SplitPlan((32, 2048, 7, 7), (2, 3), (0,))),  # NCHW: always (H, W) first
    ((2, 16, 32, 64), (0, 2, 3), None),  # small: one kernel
    ((3, 17384), (1,), None),  # three rows of 17k: each program quick
    ((3, 1_000_003), (1,), None),  # a prime length: no even cut
    ((65536, 4, 1), (0, 2), SplitPlan((64, 1024, 4, 1), (1, 3), (0,))),  # a size-1 trailing axis: the leading one cut
    ((65537, 8, 2), (0, 2), None),  # and a prime leading size: no cut, and no first reduction of two elements
])
def test_when_a_reduction_splits(shape: tuple[int, ...], axes: tuple[int, ...], expected: SplitPlan | None) -> None:
    assert plan_split(shape, axes, "sum") == expected
    assert plan_split(shape, axes, "argmax") is None  # an index is not the reduction of partial indices


def _partials(ex: fl.Exploration) -> list[str]:
    return [n.name for n in ex.decomposed.graph.nodes if n.name.endswith("_partial") or "_partial_" in n.name]


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "sum_nchw": (lambda x: x.sum((0, 2, 3)), (4, 8, 128, 128)),
    "mean_nchw_keepdim": (lambda x: x.mean((0, 2, 3), keepdim=True), (4, 8, 128, 128)),
    "amax_nchw": (lambda x: x.amax((0, 2, 3)), (4, 8, 128, 128)),
    "amin_column": (lambda x: x.amin(0), (32768, 16)),
    "sum_all": (lambda x: x.sum(), (512, 1024)),
    "mean_of_transposed": (lambda x: x.t().mean(0), (16, 32768)),  # split through a permuted view
    "sum_of_product": (lambda x: (x * x + 1).sum((0, 2, 3)), (4, 8, 128, 128)),  # the producer fuses into the partial
    "prod_near_one": (lambda x: (1 + x / 64).prod(0), (32768, 16)),  # bf16 keeps x / 64 (not all ones)
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_reduction_matches_eager(case: str, dtype: torch.dtype) -> None:
    fn, shape = CASES[case]
    x = torch.randn(shape, dtype=dtype)
    ex = fl.explore(fn, x)
    assert _partials(ex), ex.decomposed.as_text()
    fresh = torch.randn(shape, dtype=dtype)
    expected = fn(fresh)
    if case == "prod_near_one" and dtype == torch.bfloat16:
        # Eager's CPU product of bf16 values rounds to bf16 at every step (1e-6 where the product is 1e-2); a GPU
        # and both compilers accumulate in float32: the reference is the float32 product of the same bf16 factors.
        expected = (1 + fresh / 64).float().prod(0).to(dtype)
    actual = ex(fresh)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    tolerance = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(actual, expected, **tolerance)


def test_integer_sum_splits_exactly() -> None:
    x = torch.randint(-1000, 1000, (4, 8, 128, 128), dtype=torch.int32)
    ex = fl.explore(lambda t: t.sum((0, 2, 3)), x)
    assert _partials(ex)
    fresh = torch.randint(-1000, 1000, x.shape, dtype=torch.int32)
    assert torch.equal(ex(fresh), fresh.sum((0, 2, 3)))


def test_batch_norm_training_forward_and_backward() -> None:
    torch._dynamo.reset()
    eager = torch.nn.BatchNorm2d(8).train()
    with torch.no_grad():
        eager.weight.uniform_(0.5, 1.5)
        eager.bias.normal_()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend=fl.backend)
    before = dynamo_backend.mark()
    x = torch.randn(4, 8, 128, 128)
    x_eager, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = eager(x_eager)
    actual = compiled(x_ours)
    expected.square().sum().backward()
    actual.square().sum().backward()
    graphs = [g.exploration for g in dynamo_backend.since(before)]
    assert any(_partials(ex) for ex in graphs), "batch norm's statistics were not split"
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x_ours.grad, x_eager.grad, rtol=1e-3, atol=1e-3)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(ours.parameters(), eager.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-3, atol=1e-2)


def test_random_split_programs_match_eager() -> None:
    # Random shapes, reduced axes, ops, layouts and dtypes around the split thresholds, with a producer fused into the
    # partial reduction and the result broadcast back over its input (the pattern of a normalisation).
    split = 0
    for seed in range(16):
        split += _random_program(seed)
    assert split >= 4, f"only {split} of 16 random programs split: the generator misses the thresholds"


def _random_program(seed: int) -> bool:
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list) -> Any:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    rank = pick([2, 3, 4])
    shape = [pick([2, 4, 8]) for _ in range(rank - 1)] + [pick([16384, 32768])]
    order = torch.randperm(rank, generator=gen).tolist()
    axes = tuple(sorted(torch.randperm(rank, generator=gen)[:pick(list(range(1, rank + 1)))].tolist()))
    op = pick(["sum", "mean", "amax", "amin"])
    dtype = pick([torch.float32, torch.bfloat16])

    def program(x: torch.Tensor) -> torch.Tensor:
        view = x.permute(order)
        reduced = getattr(view * 0.5 + 1, op)(axes, keepdim=True)
        return view - reduced

    x = torch.randn(shape, dtype=dtype, generator=gen).permute([order.index(i) for i in range(rank)]).contiguous()
    ex = fl.explore(program, x)
    fresh = torch.randn(x.shape, dtype=dtype)
    tolerance = dict(rtol=2e-2, atol=6e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ex(fresh), program(fresh), **tolerance,
                               msg=lambda m: f"seed {seed}: {op} {axes} of {shape} by {order}, {dtype}: {m}")
    return bool(_partials(ex))


# A variance splits as a sum does, in one pass: each part's mean and squared deviations, then Chan's combination.
VARIANCES: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[int, ...]]] = {
    "var_mean_columns": (lambda x: torch.var_mean(x, 0), (1 << 20, 16)),
    "var_keepdim": (lambda x: torch.var(x, 0, keepdim=True), (1 << 20, 16)),
    "std_leading_pair": (lambda x: torch.std(x, (0, 1)), (64, 1 << 14, 16)),
    "var_mean_nchw_biased": (lambda x: torch.var_mean(x, (0, 2, 3), correction=0, keepdim=True), (8, 16, 64, 256)),
    "var_long_rows": (lambda x: torch.var(x, -1), (4, 1 << 20)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(VARIANCES))
def test_split_variance_is_one_pass_and_matches_float64(case: str, dtype: torch.dtype) -> None:
    fn, shape = VARIANCES[case]
    ex = fl.explore(fn, torch.randn(shape).to(dtype))
    assert _partials(ex) and len(ex.generated.kernels) == 2, ex.fused.as_text()
    fresh = (torch.randn(shape) * 2 + 7).to(dtype)  # an offset mean: a one-pass sum of squares would cancel
    got, want = ex(fresh), fn(fresh.double())
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for mine, exact in zip(got, want):
        assert mine.shape == exact.shape and mine.dtype == dtype
        # float32: far inside eager's own error; bf16: the output's rounding (values 2-7, spacing 1/64-1/32)
        tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=2e-2)
        torch.testing.assert_close(mine.double(), exact, **tolerance)


def test_a_split_column_sum_reads_its_bf16_input_in_the_partial_kernel() -> None:
    # The split reshapes [16, 4096, 1024] into parts; a reshape runs between kernels, so the float32 upcast before it
    # was a kernel of its own writing the whole matrix (400 MB at this size). The reshape now moves ahead of the cast.
    x = torch.randn(16, 4096, 1024, dtype=torch.bfloat16)
    fn = lambda t: t.sum((0, 1))  # noqa: E731
    ex = fl.explore(fn, x)
    assert _partials(ex) and len(ex.generated.kernels) == 2
    first = ex.fused.groups[[g.is_kernel for g in ex.fused.groups].index(True)]
    assert first.bytes_read == x.numel() * 2 and first.bytes_written < x.numel(), first
    fresh = torch.randn(x.shape, dtype=torch.bfloat16)
    torch.testing.assert_close(ex(fresh), fresh.float().sum((0, 1)).to(torch.bfloat16), rtol=2e-2, atol=1e-1)
