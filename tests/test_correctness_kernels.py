"""Generated kernels against eager PyTorch where fusion and code generation once gave silently wrong results.

Each check captures on one set of random inputs and runs on fresh ones: integer and boolean outputs must be
exact, floating outputs within compare.TOLERANCES (exact where PyTorch's result is one rounding of a defined value:
casts, floor division, remainders). Shapes include square matrices and [B, T, T], where a value read along the
wrong axis has the right shape and so goes unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab.compare import TOLERANCES

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTEGERS = (torch.bool, torch.int8, torch.int32, torch.int64)


def random(shape: tuple[int, ...], dtype: torch.dtype, device: str, low: int = -100, high: int = 100) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(low, high, shape, device=device, dtype=dtype)
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def assert_same(actual: torch.Tensor, expected: torch.Tensor, exact: bool = False, what: str = "") -> None:
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != eager {expected.dtype}"
    if exact or not expected.dtype.is_floating_point:
        same = (actual == expected) | (actual.isnan() & expected.isnan()) if expected.dtype.is_floating_point \
            else actual == expected
        if expected.dtype.is_floating_point:  # a signed zero is part of the value (a NaN's sign is not)
            same &= (torch.signbit(actual) == torch.signbit(expected)) | expected.isnan()
        assert bool(same.all()), f"{what}: {int((~same).sum())} elements differ\n{actual}\n!= eager\n{expected}"
        return
    atol, rtol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def check(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], exact: bool = False,
          policy: str = "default") -> fl.Exploration:
    """Capture on one draw of inputs, compare on a fresh draw."""
    ex = fl.explore(fn, *make(), policy=policy)
    fresh = make()
    expected = fn(*fresh)
    actual = ex(*fresh)
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual if isinstance(actual, (tuple, list)) else (actual,))
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert_same(a, e, exact, f"output {index}\n{ex.fused.as_text()}")
    return ex


# -- 1. concatenation of one value with itself ------------------------------------------------------------------

CATS: dict[str, Callable[..., torch.Tensor]] = {
    "a_a": lambda a: torch.cat([a, a], 1),
    "a_a_last": lambda a: torch.cat([a, a], -1),
    "a_b_a": lambda a: torch.cat([a, a * 2, a], 0),
    "scaled_twice": lambda a: torch.cat([a * 3, a * 3], 1) + 1,
    "rotary": lambda a: torch.cat((a, a), -1).cos() * torch.cat((a, a), -1).sin(),
}


@pytest.mark.parametrize("shape", [(4, 6), (5, 5), (2, 3, 3), (2, 4, 4)], ids=str)
@pytest.mark.parametrize("name", CATS)
def test_cat_of_a_repeated_value(name: str, shape: tuple[int, ...], device: str) -> None:
    # exact where the kernel only copies (a GPU contracts a * 3 + 1 into one fused multiply-add)
    check(CATS[name], lambda: (random(shape, torch.float32, device),), exact=name in ("a_a", "a_a_last"))


def test_cat_of_repeated_integers(device: str) -> None:
    check(lambda a, b: torch.cat([a, b, a, b], -1), lambda: (random((3, 3), torch.int32, device),
                                                             random((3, 2), torch.int32, device)))


# -- 2. reduction results read along another axis -------------------------------------------------------------

def _gcn(a: torch.Tensor) -> torch.Tensor:
    d = a.sum(1)
    return d[:, None] * a * d[None, :]


SQUARE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "div_sum1": lambda a: a / a.sum(1),
    "mul_norm1": lambda a: a * a.norm(dim=1),
    "sub_mean0": lambda a: a - a.mean(0),
    "sub_mean1": lambda a: a - a.mean(1),
    "add_amax0": lambda a: a + a.amax(0),
    "keepdim_t": lambda a: a - a.sum(1, keepdim=True).t(),
    "keepdim0_t": lambda a: a - a.sum(0, keepdim=True).t(),
    "gcn": _gcn,
    "row_read": lambda a: a / a.sum(1)[:, None],
    "softmax": lambda a: a.softmax(-1),
    "both_axes": lambda a: a - a.amax(1) - a.amax(1)[:, None],
    "epilogue_then_column": lambda a: a * (a.sum(1) * 2 + 1),
}


@pytest.mark.parametrize("size", [3, 5, 16])
@pytest.mark.parametrize("name", SQUARE)
def test_reduction_broadcast_on_a_square(name: str, size: int, device: str) -> None:
    check(SQUARE[name], lambda: (torch.rand(size, size, device=device),))


CUBE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add_amax_last": lambda a: a + a.amax(-1),
    "add_amax_mid": lambda a: a + a.amax(1),
    "sub_sum0": lambda a: a - a.sum(0),
    "keepdim_transposed": lambda a: a - a.mean(-1, keepdim=True).transpose(-1, -2),
    "keepdim_permuted": lambda a: a * a.sum(-1, keepdim=True).permute(2, 0, 1),
    "row_in_batch_read_as_column": lambda a: a * a.amax(-1)[:, None, :],
    "row_in_batch": lambda a: a * a.amax(-1)[:, :, None],
    "column_sum": lambda a: a / a.sum(-2, keepdim=True),
    "attention_like": lambda a: (a - a.amax(-1, keepdim=True)).exp() / (a - a.amax(-1, keepdim=True)).exp().sum(-1)[
        ..., None],
}


# These broadcast a [B, T] result against [B, T, T] from the right: they need B == T.
NEEDS_CUBE = {"add_amax_last", "add_amax_mid", "keepdim_permuted"}


@pytest.mark.parametrize("name,shape", [(name, shape) for name in CUBE for shape in ((3, 3, 3), (2, 4, 4), (4, 4, 4))
                                        if name not in NEEDS_CUBE or shape[0] == shape[1]], ids=str)
def test_reduction_broadcast_on_b_t_t(name: str, shape: tuple[int, ...], device: str) -> None:
    check(CUBE[name], lambda: (torch.rand(shape, device=device),))


def test_misread_reduction_is_a_recorded_decision() -> None:
    ex = fl.explore(lambda a: a / a.sum(1), torch.rand(5, 5))
    refused = [d for d in ex.fused.decisions if not d.fused and "along another axis" in d.reason]
    assert refused, ex.fused.as_text()
    assert "needs a second kernel" in refused[0].reason
    assert len(ex.fused.kernels) == 2


def test_row_read_still_fuses() -> None:
    ex = fl.explore(lambda a: a / a.sum(1, keepdim=True), torch.rand(5, 5))
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    ex = fl.explore(lambda a: a.softmax(-1), torch.rand(2, 4, 4))
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()


def test_forcing_a_misread_reduction_says_why() -> None:
    ex = fl.explore(lambda a: a / a.sum(1), torch.rand(5, 5))
    with pytest.raises(ValueError, match="along another axis"):
        ex.with_fusion(force=[("sum", "reshape"), ("reshape", "expand"), ("expand", "div")]).fused  # noqa: B018


# -- 3. casts (Triton's interpreter converts to bfloat16 wrongly) ----------------------------------------------

def _cast_inputs(dtype: torch.dtype, device: str) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(64, device=device) > 0.5
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        low, high = max(info.min, -(2 ** 30)), min(info.max, 2 ** 30)
        return torch.randint(low, high, (64,), device=device, dtype=dtype)
    values = torch.randn(64, device=device, dtype=torch.float64) * 100
    return values.to(dtype)


@pytest.mark.parametrize("target", FLOATS, ids=str)
@pytest.mark.parametrize("source", INTEGERS + FLOATS, ids=str)
def test_cast_to_floating(source: torch.dtype, target: torch.dtype, device: str) -> None:
    check(lambda a: a.to(target), lambda: (_cast_inputs(source, device),), exact=True)


@pytest.mark.parametrize("target", [torch.bool, torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("source", FLOATS, ids=str)
def test_cast_of_computed_half_values_to_integers(source: torch.dtype, target: torch.dtype, device: str) -> None:
    check(lambda a: (a * 1.1).to(target), lambda: (_cast_inputs(source, device),), exact=True)


SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 3.4e38, -3.4e38, 1e-40, -1e-40, 5e-39, 1.17e-38,
           1.00390625, 1.01171875, 1.0 + 2 ** -8 + 2 ** -30, 65504.0, 65520.0, 70000.0, 6e-8, 3e-8]


@pytest.mark.parametrize("target", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("source", [torch.float32, torch.float64], ids=str)
def test_cast_rounds_to_nearest_even(source: torch.dtype, target: torch.dtype, device: str) -> None:
    values = torch.tensor(SPECIAL + [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40], dtype=torch.float64)
    check(lambda a: a.to(target), lambda: (values.to(source).to(device),), exact=True)


def test_bfloat16_plus_int64(device: str) -> None:
    check(lambda a, b: a + b, lambda: (random((8, 8), torch.bfloat16, device),
                                       random((8, 8), torch.int64, device)), exact=True)


def test_attention_mask_in_bfloat16(device: str) -> None:
    def mask(m: torch.Tensor) -> torch.Tensor:
        return (1 - m.to(torch.bfloat16)) * torch.finfo(torch.bfloat16).min
    check(mask, lambda: (torch.rand(4, 16, device=device) > 0.5,), exact=True)


def test_bfloat16_subnormals_load_exactly(device: str) -> None:
    values = torch.tensor([1e-40, -1e-40, 5e-39, 1.1e-38, 3.0], dtype=torch.bfloat16)
    check(lambda a: a * 2, lambda: (values.to(device),), exact=True)


# -- 4. floor division, remainder, fmod ------------------------------------------------------------------------

FLOAT_DIVIDENDS = [1.0, 0.7, -0.3, 0.1, -0.1, 5.0, -5.0, 0.0, -0.0, 3.3, -7.7, 1e30, -2.5, 2.5,
                   float("inf"), -float("inf"), float("nan")]


@pytest.mark.parametrize("divisor", [0.1, 0.7, -0.3, 2.0, -2.0, 1.0, float("inf"), 0.0], ids=str)
@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_division_by_a_literal(op: str, divisor: float, dtype: torch.dtype, device: str) -> None:
    function = getattr(torch, op)
    values = torch.tensor(FLOAT_DIVIDENDS, dtype=dtype, device=device)
    check(lambda a: function(a, divisor), lambda: (values,), exact=True)


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_division_by_a_tensor(op: str, dtype: torch.dtype, device: str) -> None:
    function = getattr(torch, op)
    values = torch.tensor(FLOAT_DIVIDENDS, dtype=torch.float64)
    divisors = torch.tensor([0.1, 0.7, -0.3, -0.0, 0.0, 3.0, -3.0, float("inf"), float("nan")], dtype=torch.float64)
    a, b = values[:, None].expand(-1, len(divisors)), divisors[None, :].expand(len(values), -1)

    def make() -> tuple[torch.Tensor, ...]:
        return (a.contiguous().to(dtype).to(device), b.contiguous().to(dtype).to(device))
    check(function, make, exact=True)
    check(function, lambda: (random((6, 6), dtype, device), random((6, 6), dtype, device)), exact=True)


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64], ids=str)
def test_integer_division(op: str, dtype: torch.dtype, device: str) -> None:
    function = getattr(torch, op)

    def make() -> tuple[torch.Tensor, ...]:
        divisor = torch.randint(1, 9, (6, 6), device=device, dtype=dtype)
        sign = torch.randint(0, 2, (6, 6), device=device, dtype=dtype) * 2 - 1
        return random((6, 6), dtype, device), divisor * sign
    check(function, make)
    for literal in (3, -3, 1, -1):
        check(lambda a, literal=literal: function(a, literal), lambda: (random((6, 6), dtype, device),))


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
def test_integer_division_by_zero_raises_as_eager(op: str) -> None:
    function = getattr(torch, op)
    a, b = torch.randint(-9, 9, (4, 4)), torch.randint(1, 4, (4, 4))
    ex = fl.explore(lambda x, y: function(x, y) + 1, a, b)
    zero = b.clone()
    zero[1, 2] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        function(a, zero)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ex(a, zero)
    torch.testing.assert_close(ex(a, b), function(a, b) + 1)


# -- 5. half-precision values leaving their dtype are rounded first --------------------------------------------

HALF_EXITS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "widen_then_scale": lambda h: (h * 1.1).float() * 3.3,
    "widen_to_double": lambda h: (h * 1.1).double(),
    "compare": lambda h: (h * 1.1) > 1.0,
    "compare_eq": lambda h: (h * 3.3) == (h * 3.3).round(),
    "to_integer": lambda h: (h * 37.1).long(),
    "where_condition": lambda h: torch.where((h * 1.1) > 0.5, h, -h),
    "argmax": lambda h: (h * 1.1).argmax(-1),  # one op: a longer half chain is within tolerance, not exact
    "other_half": lambda h: (h * 1.1).to(torch.float16 if h.dtype == torch.bfloat16 else torch.bfloat16) * 3,
    "sum_of_widened": lambda h: (h * 1.1).float().sum(-1),
}


@pytest.mark.parametrize("shape", [(64, 64), (4, 8, 8)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", HALF_EXITS)
def test_half_values_rounded_where_they_leave_their_dtype(name: str, dtype: torch.dtype, shape: tuple[int, ...],
                                                          device: str) -> None:
    exact = name not in ("sum_of_widened",)
    check(HALF_EXITS[name], lambda: (random(shape, dtype, device) * 4,), exact=exact)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_chains_stay_within_tolerance(dtype: torch.dtype, device: str) -> None:
    check(lambda h: ((h * 1.1).exp() + h).mean(-1), lambda: (random((16, 32), dtype, device),))
    check(lambda h: (h * 1.1 - 0.5).softmax(-1), lambda: (random((16, 32), dtype, device),))


# -- randomised: arithmetic over every dtype, square shapes --------------------------------------------------------

ARITHMETIC: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add_mul": lambda a, b: a * 3 + b,
    "where_compare": lambda a, b: torch.where(a > b, a, b),
    "row_sum": lambda a, b: a.sum(-1, keepdim=True) + b,
    "max_broadcast": lambda a, b: torch.maximum(a, b.amax(0)),
    "cast_chain": lambda a, b: (a.to(torch.float32) * 0.5).to(b.dtype) + b,
}


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4)], ids=str)
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, *FLOATS], ids=str)
@pytest.mark.parametrize("name", ARITHMETIC)
def test_arithmetic_over_dtypes(name: str, dtype: torch.dtype, shape: tuple[int, ...], device: str) -> None:
    check(ARITHMETIC[name], lambda: (random(shape, dtype, device, -20, 20), random(shape, dtype, device, -20, 20)))


# -- two-operand math functions over operands of different tile shapes ----------------------------------------------
# (a constant made by `full` beside a value per row: BLOOM's ALiBi slopes, `pow(full(base), arange(heads))`; a value
# per row beside one per column). The CPU's interpreter gave the ALiBi result its first operand's [1, 1] shape and
# failed (BLOOM on a CPU); the row-by-column forms passed before and stand beside it.

BINARY_MATH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "alibi_slopes": lambda x: torch.pow(torch.full((), 0.25, device=x.device),
                                        torch.arange(1, 5, device=x.device, dtype=torch.int32))[:, None, None] * x[0],
    "pow_row_by_column": lambda x: torch.pow(x.abs().sum(-1, keepdim=True) + 1, x.mean(0, keepdim=True)),
    "atan2_row_by_column": lambda x: torch.atan2(x.amax(-1, keepdim=True), x.amin(0, keepdim=True)),
    "fmod_constant_by_row": lambda x: x * torch.fmod(torch.full((), 7.5, device=x.device),
                                                     x.abs().sum(-1, keepdim=True) + 1),
}


@pytest.mark.parametrize("shape", [(4, 16), (6, 6)], ids=str)
@pytest.mark.parametrize("name", BINARY_MATH)
def test_binary_math_over_tiles_of_different_shapes(name: str, shape: tuple[int, ...], device: str) -> None:
    check(BINARY_MATH[name], lambda: (random(shape, torch.float32, device),))
