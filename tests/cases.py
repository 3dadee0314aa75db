"""The shared case table: every function fusionlab is checked on, its inputs and its expected kernel counts.

Each `Case` is a function (or nn.Module), a factory of fresh random inputs for a device, the number of kernels
each policy should give (where the number is part of fusionlab's promise) and, where the default dtype
tolerance does not fit, its own tolerance. Tests mirror this table; nothing here imports a test.

    >>> case = find("softmax_last")
    >>> args, kwargs = case.make_inputs("cpu")
    >>> case.fn(*args, **kwargs).shape
    torch.Size([8, 32])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
M, C = 8, 32  # small: the interpreter runs every kernel through numpy


@dataclass(frozen=True)
class Case:
    """One function and how to feed it. `make_inputs(device)` returns fresh `(args, kwargs)` on each call."""

    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[str], Inputs]
    policy_kernels: dict[str, int] | None = None
    atol: float | None = None
    rtol: float | None = None
    tags: tuple[str, ...] = field(default=())

    def __repr__(self) -> str:
        return f"Case({self.name})"

    def tolerance(self) -> dict[str, float]:
        if self.atol is None and self.rtol is None:
            return {}
        return {"atol": self.atol or 0.0, "rtol": self.rtol or 0.0}

    def callable_on(self, device: str) -> Callable[..., Any]:
        """The function, or a copy of the module moved to `device`."""
        if isinstance(self.fn, nn.Module):
            return copy.deepcopy(self.fn).to(device).eval()
        return self.fn


# -- fresh random inputs (never zeros; inside each op's domain) ---------------------------------------
def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def positive(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) * 2 + 0.25


def unit(*shape: int) -> torch.Tensor:
    """Strictly inside (-1, 1): for asin, acos, atanh, erfinv."""
    return (torch.rand(*shape) * 1.8 - 0.9).clamp(-0.9, 0.9)


def away_from_zero(*shape: int) -> torch.Tensor:
    magnitude = torch.rand(*shape) * 2 + 0.5
    return torch.where(torch.rand(*shape) > 0.5, magnitude, -magnitude)


def ints(*shape: int, low: int = -8, high: int = 9, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, dtype=dtype)


def nonzero_ints(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    value = torch.randint(1, 6, shape, dtype=dtype)
    return torch.where(torch.rand(*shape) > 0.5, value, -value)


def small_ints_as_float(*shape: int) -> torch.Tensor:
    """Floats with repeated values, so comparisons are sometimes equal."""
    return torch.randint(-2, 3, shape).float()


def with_specials(*shape: int) -> torch.Tensor:
    x = torch.randn(*shape)
    flat = x.view(-1)
    flat[::7] = float("nan")
    flat[3::11] = float("inf")
    flat[5::13] = float("-inf")
    return x


def make(*factories: Callable[[], Any], **keyword: Callable[[], Any]) -> Callable[[str], Inputs]:
    """An input factory: each positional/keyword factory makes one CPU value, moved to the device."""

    def build(device: str) -> Inputs:
        def place(value: Any) -> Any:
            return value.to(device) if isinstance(value, torch.Tensor) else value

        return (tuple(place(f()) for f in factories), {k: place(f()) for k, f in keyword.items()})

    return build


def mat(factory: Callable[..., torch.Tensor] = randn, *shape: int) -> Callable[[], torch.Tensor]:
    dims = shape or (M, C)
    return lambda: factory(*dims)


def scalar(value: Any) -> Callable[[], Any]:
    return lambda: value


CASES: list[Case] = []


def case(name: str, fn: Callable[..., Any], make_inputs: Callable[[str], Inputs], *,
         kernels: dict[str, int] | None = None, atol: float | None = None, rtol: float | None = None,
         tags: tuple[str, ...] = ()) -> None:
    CASES.append(Case(name, fn, make_inputs, kernels, atol, rtol, tags))


# -- single elementwise ops: every one with a rule in fusionlab.decompose.rules ---------------------
_UNARY: list[tuple[str, Callable[..., Any], Callable[..., torch.Tensor]]] = [
    ("neg", torch.neg, randn), ("abs", torch.abs, randn), ("reciprocal", torch.reciprocal, away_from_zero),
    ("exp", torch.exp, randn), ("exp2", torch.exp2, randn), ("expm1", torch.expm1, randn),
    ("log", torch.log, positive), ("log2", torch.log2, positive), ("log10", torch.log10, positive),
    ("log1p", torch.log1p, positive), ("sqrt", torch.sqrt, positive), ("rsqrt", torch.rsqrt, positive),
    ("sin", torch.sin, randn), ("cos", torch.cos, randn), ("tan", torch.tan, unit),
    ("asin", torch.asin, unit), ("acos", torch.acos, unit), ("atan", torch.atan, randn),
    ("sinh", torch.sinh, randn), ("cosh", torch.cosh, randn), ("tanh", torch.tanh, randn),
    ("asinh", torch.asinh, randn), ("acosh", torch.acosh, lambda *s: positive(*s) + 1),
    ("atanh", torch.atanh, unit), ("erf", torch.erf, randn), ("erfinv", torch.erfinv, unit),
    ("sigmoid", torch.sigmoid, randn), ("floor", torch.floor, lambda *s: randn(*s) * 4),
    ("ceil", torch.ceil, lambda *s: randn(*s) * 4), ("round", torch.round, lambda *s: randn(*s) * 4),
    ("trunc", torch.trunc, lambda *s: randn(*s) * 4), ("frac", torch.frac, lambda *s: randn(*s) * 4),
    ("sign", torch.sign, small_ints_as_float), ("sgn", torch.sgn, randn), ("square", torch.square, randn),
    ("relu", torch.relu, randn), ("isnan", torch.isnan, with_specials), ("isinf", torch.isinf, with_specials),
    ("logical_not", torch.logical_not, small_ints_as_float), ("bitwise_not", torch.bitwise_not, ints),
    ("clone", torch.clone, randn), ("logit", torch.logit, lambda *s: torch.rand(*s) * 0.9 + 0.05),
]
for _name, _op, _factory in _UNARY:
    case(f"unary_{_name}", _op, make(mat(_factory)), kernels={"none": 1, "pointwise": 1, "default": 1}
         if _name not in ("frac", "logit", "sgn") else None, tags=("single",))

_BINARY: list[tuple[str, Callable[..., Any], Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = [
    ("add", torch.add, randn, randn), ("sub", torch.sub, randn, randn), ("mul", torch.mul, randn, randn),
    ("div", torch.div, randn, away_from_zero), ("pow", torch.pow, positive, randn),
    ("atan2", torch.atan2, randn, randn), ("fmod", torch.fmod, lambda *s: randn(*s) * 4, away_from_zero),
    ("remainder", torch.remainder, lambda *s: randn(*s) * 4, away_from_zero),
    ("floor_divide", torch.floor_divide, lambda *s: randn(*s) * 4, away_from_zero),
    ("maximum", torch.maximum, small_ints_as_float, randn), ("minimum", torch.minimum, small_ints_as_float, randn),
    ("fmax", torch.fmax, randn, randn), ("fmin", torch.fmin, randn, randn),
    ("eq", torch.eq, small_ints_as_float, small_ints_as_float), ("ne", torch.ne, small_ints_as_float,
                                                                 small_ints_as_float),
    ("lt", torch.lt, small_ints_as_float, small_ints_as_float), ("le", torch.le, small_ints_as_float,
                                                                 small_ints_as_float),
    ("gt", torch.gt, small_ints_as_float, small_ints_as_float), ("ge", torch.ge, small_ints_as_float,
                                                                 small_ints_as_float),
    ("logical_and", torch.logical_and, small_ints_as_float, small_ints_as_float),
    ("logical_or", torch.logical_or, small_ints_as_float, small_ints_as_float),
    ("logical_xor", torch.logical_xor, small_ints_as_float, small_ints_as_float),
    ("bitwise_and", torch.bitwise_and, ints, ints), ("bitwise_or", torch.bitwise_or, ints, ints),
    ("bitwise_xor", torch.bitwise_xor, ints, ints),
    ("int_remainder", torch.remainder, ints, nonzero_ints), ("int_floor_divide", torch.floor_divide, ints,
                                                             nonzero_ints),
    ("int_div_true", torch.div, ints, nonzero_ints),
]
for _name, _op, _left, _right in _BINARY:
    case(f"binary_{_name}", _op, make(mat(_left), mat(_right)), tags=("single",))

# Ternary and scalar-argument elementwise ops.
case("where", lambda c, x, y: torch.where(c > 0, x, y), make(mat(), mat(), mat()),
     kernels={"pointwise": 1, "default": 1})
case("where_scalar", lambda x: torch.where(x > 0, x, 0.5), make(mat()))
case("clamp_scalars", lambda x: torch.clamp(x, -0.5, 0.7), make(mat()))
case("clamp_min_only", lambda x: x.clamp(min=0.1), make(mat()))
case("clamp_tensors", lambda x, lo, hi: torch.clamp(x, lo, hi), make(mat(), mat(lambda *s: -positive(*s)),
                                                                      mat(positive)))
case("masked_fill", lambda x, m: x.masked_fill(m > 0, -1.5), make(mat(), mat()))
case("lerp", torch.lerp, make(mat(), mat(), scalar(0.3)))
case("addcmul", lambda x, a, b: torch.addcmul(x, a, b, value=0.5), make(mat(), mat(), mat()))
case("addcdiv", lambda x, a, b: torch.addcdiv(x, a, b, value=2.0), make(mat(), mat(), mat(away_from_zero)))
case("add_alpha", lambda x, y: torch.add(x, y, alpha=3), make(mat(), mat()))
case("rsub_scalar", lambda x: 2.0 - x, make(mat()))
case("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), make(mat(lambda *s: randn(*s) * 4),
                                                                            mat(away_from_zero)))
case("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), make(mat(lambda *s: randn(*s) * 4),
                                                                            mat(away_from_zero)))
case("pow_scalar_exponents", lambda x: x ** 2 + x ** 3 + x ** 0.5 + x ** -1 + x ** 1.7, make(mat(positive)),
     kernels={"pointwise": 1, "default": 1})
case("scalar_base_pow", lambda x: torch.pow(2.0, x), make(mat()))
case("round_decimals", lambda x: torch.round(x, decimals=2), make(mat()))

# -- activations --------------------------------------------------------------------------------------
_ACTIVATIONS: list[tuple[str, Callable[..., Any]]] = [
    ("gelu", F.gelu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), ("silu", F.silu),
    ("mish", F.mish), ("softplus", F.softplus), ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2)), ("hardswish", F.hardswish), ("hardsigmoid", F.hardsigmoid),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.5)), ("elu", F.elu), ("elu_alpha", lambda x: F.elu(x, 0.5)),
    ("celu", lambda x: F.celu(x, 1.5)), ("selu", F.selu), ("relu6", F.relu6),
    ("threshold", lambda x: F.threshold(x, 0.1, -2.0)),
]
for _name, _op in _ACTIVATIONS:
    case(f"act_{_name}", _op, make(mat(lambda *s: randn(*s) * 3)), kernels={"pointwise": 1, "default": 1},
         tags=("activation",))

# -- chains --------------------------------------------------------------------------------------------
case("chain_pointwise", lambda x, y: torch.sigmoid(x * y + 1.0).exp() - y, make(mat(), mat()),
     kernels={"pointwise": 1, "default": 1})
case("gelu_bias", lambda x, b: F.gelu(x + b), make(mat(), mat(randn, C)), kernels={"pointwise": 1, "default": 1})
case("diamond", lambda x: torch.sin(x) * torch.cos(x) + x, make(mat()), kernels={"pointwise": 1, "default": 1})

# -- reductions on each axis ---------------------------------------------------------------------------
case("sum_axis0", lambda x: x.sum(0), make(mat()), kernels={"default": 1})
case("sum_axis1", lambda x: x.sum(1), make(mat()), kernels={"default": 1})
case("sum_last_keepdim", lambda x: x.sum(-1, keepdim=True), make(mat()), kernels={"default": 1})
case("sum_all", lambda x: x.sum(), make(mat()), kernels={"default": 1})
case("sum_axes_3d", lambda x: x.sum((0, 2)), make(mat(randn, 4, 6, 8)))
case("sum_middle_axis", lambda x: x.sum(1), make(mat(randn, 4, 6, 8)), kernels={"default": 1})
case("mean_axis0_keepdim", lambda x: x.mean(0, keepdim=True), make(mat()))
case("mean_all", lambda x: x.mean(), make(mat()))
case("amax_axis0", lambda x: x.amax(0), make(mat()))
case("amin_last", lambda x: x.amin(-1), make(mat()))
case("prod_last", lambda x: x.prod(-1), make(mat(lambda *s: torch.rand(*s) + 0.5)))
case("prod_axis0", lambda x: x.prod(0), make(mat(lambda *s: torch.rand(*s) + 0.5)))
case("var_last", lambda x: x.var(-1), make(mat()), kernels={"default": 1})
case("var_axis0_unbiased_false", lambda x: x.var(0, unbiased=False), make(mat()))
case("std_keepdim", lambda x: x.std(-1, keepdim=True), make(mat()))
case("std_all", lambda x: x.std(), make(mat()))
case("var_mean", lambda x: torch.var_mean(x, -1), make(mat()))
case("logsumexp", lambda x: torch.logsumexp(x, -1), make(mat()), kernels={"default": 1})
case("logsumexp_axis0", lambda x: torch.logsumexp(x, 0), make(mat()))
case("argmax_last", lambda x: x.argmax(-1), make(mat()))
case("argmin_axis0", lambda x: x.argmin(0), make(mat()))
case("argmax_all", lambda x: x.argmax(), make(mat()))
case("max_dim", lambda x: torch.max(x, 1), make(mat()))
case("min_dim_keepdim", lambda x: torch.min(x, 0, keepdim=True), make(mat()))
case("max_all", lambda x: x.max(), make(mat()))
case("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1), make(mat()))
case("int_sum", lambda x: x.sum(-1), make(mat(ints)))
case("bool_sum", lambda x: (x > 0).sum(0), make(mat()))
case("sum_and_argmax_axis0", lambda x: (x.sum(0), x.argmax(0), x.amax(0)), make(mat()), kernels={"default": 1})


def _batch_norm_backward(g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                         w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A relu and batch norm's backward over the rows: two sums that read no other's result (one pass), the
    gradient after them, the relu's mask before them."""
    grad = torch.where(x > 0, g, 0)
    normed = (x - mean) * rstd
    total, dot = grad.sum(0), (grad * normed).sum(0)
    rows = x.shape[0]
    return (grad - total / rows - normed * dot / rows) * rstd * w, total, dot, x > 0


case("batch_norm_backward", _batch_norm_backward,
     make(mat(), mat(), mat(randn, C), mat(lambda c: torch.rand(c) + 0.5, C), mat(randn, C)), kernels={"default": 1})

# -- normalisations ------------------------------------------------------------------------------------
case("softmax_last", lambda x: torch.softmax(x, -1), make(mat()), kernels={"none": 5, "default": 1})
case("softmax_axis0", lambda x: torch.softmax(x, 0), make(mat()), kernels={"default": 1})
case("log_softmax", lambda x: F.log_softmax(x, -1), make(mat()), kernels={"default": 1})
case("softmax_3d_middle", lambda x: torch.softmax(x, 1), make(mat(randn, 4, 6, 8)), kernels={"default": 1})
case("layer_norm", lambda x, w, b: F.layer_norm(x, (C,), w, b), make(mat(), mat(randn, C), mat(randn, C)),
     kernels={"default": 1})
case("layer_norm_no_affine", lambda x: F.layer_norm(x, (C,)), make(mat()), kernels={"default": 1})
case("rms_norm", lambda x, w: F.rms_norm(x, (C,), w, eps=1e-6), make(mat(), mat(randn, C)), kernels={"default": 1})
case("center", lambda x: x - x.mean(-1, keepdim=True), make(mat()), kernels={"default": 1})
case("normalize_3d", lambda x: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5),
     make(mat(randn, 2, 4, 16)))

# -- broadcasting --------------------------------------------------------------------------------------
case("bias_row", lambda x, b: x * b + b, make(mat(), mat(randn, C)), kernels={"pointwise": 1, "default": 1})
case("column_broadcast", lambda x, s: x / s, make(mat(), mat(positive, M, 1)), kernels={"default": 1})
case("scalar_tensor", lambda x, s: x * s - s, make(mat(), lambda: torch.tensor(1.7)))
case("outer_broadcast", lambda a, b: a + b, make(mat(randn, M, 1), mat(randn, 1, C)))
case("rank_broadcast_3d", lambda x, b: torch.tanh(x + b), make(mat(randn, 2, M, C), mat(randn, M, C)))

# -- non-contiguous inputs -----------------------------------------------------------------------------
case("transposed_input", lambda x: torch.exp(x) + 1, make(lambda: randn(C, M).t()))
case("transposed_softmax", lambda x: torch.softmax(x, -1), make(lambda: randn(C, M).t()))
case("sliced_input", lambda x, y: x * y, make(lambda: randn(M, 2 * C)[:, ::2], mat()))
case("expanded_input", lambda x, y: x + y, make(lambda: randn(1, C).expand(M, C), mat()))
case("permuted_3d_input", lambda x: x.sum(-1), make(lambda: randn(8, 4, 6).permute(1, 2, 0)))
case("offset_slice_input", lambda x: x * 2, make(lambda: randn(M + 2, C)[2:]))

# -- dtypes --------------------------------------------------------------------------------------------
case("int_plus_float", lambda i, x: i + x, make(mat(ints), mat()))
case("int32_times_float", lambda i, x: i * x, make(mat(lambda *s: ints(*s, dtype=torch.int32)), mat()))
case("bool_times_float", lambda x, y: (x > 0) * y, make(mat(), mat()))
case("int_times_scalar", lambda i: i * 3 + 1, make(mat(ints)))
case("int_exp", lambda i: torch.exp(i), make(mat(lambda *s: ints(*s, low=-3, high=4))))
case("fp16_chain", lambda x, y: torch.sigmoid(x * y) + x, make(mat(lambda *s: randn(*s).half()),
                                                              mat(lambda *s: randn(*s).half())),
     atol=2e-3, rtol=2e-3)
case("bf16_softmax", lambda x: torch.softmax(x, -1), make(mat(lambda *s: randn(*s).bfloat16())))
case("fp16_layer_norm", lambda x, w, b: F.layer_norm(x, (C,), w, b),
     make(mat(lambda *s: randn(*s).half()), mat(lambda *s: randn(*s).half(), C),
          mat(lambda *s: randn(*s).half(), C)), atol=1e-2, rtol=1e-2)
case("half_plus_float", lambda x, y: x + y, make(mat(lambda *s: randn(*s).half()), mat()))
case("cast_to_half", lambda x: (x * 2).to(torch.float16), make(mat()))
case("cast_to_int", lambda x: (x * 4).to(torch.int32), make(mat()))
case("cast_to_bool", lambda x: x.round().bool(), make(mat()))
case("cast_int_to_float", lambda i: i.float() / 3, make(mat(ints)))
case("float64", lambda x: torch.exp(x) * 2, make(mat(lambda *s: randn(*s).double())))

# -- multiple outputs ----------------------------------------------------------------------------------
case("two_outputs", lambda x: (x + 1, x * 2), make(mat()))  # siblings: no horizontal fusion (yet)
case("chain_and_its_middle", lambda x: (torch.exp(x) + 1, torch.exp(x)), make(mat()),
     kernels={"pointwise": 1, "default": 1})
case("add_layer_norm", lambda x, r, w, b: (x + r, F.layer_norm(x + r, (C,), w, b)),
     make(mat(), mat(), mat(randn, C), mat(randn, C)), kernels={"default": 1})
case("softmax_and_log_softmax", lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1)), make(mat()))
case("row_and_full_outputs", lambda x: (x.sum(-1), x.exp()), make(mat()))
case("dict_output", lambda x: {"a": x.relu(), "b": x.sigmoid()}, make(mat()))

# -- views ---------------------------------------------------------------------------------------------
case("reshape", lambda x: (x * 2).reshape(4, 64) + 1, make(mat()))
case("permute", lambda x: (x + 1).permute(2, 0, 1).exp(), make(mat(randn, 2, 4, 8)))
case("transpose", lambda x, y: x.transpose(0, 1) * y, make(mat(), mat(randn, C, M)))
case("unsqueeze_squeeze", lambda x: (x.unsqueeze(1) * 2).squeeze(1) + x, make(mat()))
case("slice", lambda x: x[:, 4:20].exp() + x[:, :16], make(mat()))
case("select", lambda x: x[2] + x[:, 0].sum(), make(mat()))
case("chunk", lambda x: torch.mul(*x.chunk(2, dim=-1)), make(mat()))
case("split", lambda x: sum(t.sum(-1) for t in x.split([8, 8, 16], dim=-1)), make(mat()))
case("unbind", lambda x: torch.stack(x[:3].unbind(0), -1).sum(), make(mat()))
case("flatten", lambda x: x.flatten(1).softmax(-1), make(mat(randn, 4, 4, 8)))
case("cat", lambda x, y: torch.cat([x.exp(), y * 2], dim=-1).sum(-1), make(mat(), mat()))
case("expand_method", lambda x, y: x.expand(M, C) * y, make(mat(randn, 1, C), mat()))


# -- modules: parameters and buffers become inputs -----------------------------------------------------
class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(C)
        self.up = nn.Linear(C, 2 * C)
        self.down = nn.Linear(2 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Scaled(nn.Module):
    """A module with a registered buffer and a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.rand(C) + 0.5)
        self.shift = nn.Parameter(torch.randn(C))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.scale + self.shift)


class RMSBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(C, eps=1e-6)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(x))


_generator_state = torch.random.get_rng_state()
torch.manual_seed(1234)
case("module_mlp", MLP(), make(mat()), atol=1e-4, rtol=1e-4, tags=("module",))
case("module_buffer", Scaled(), make(mat()), kernels={"default": 1}, tags=("module",))
case("module_rms_norm", RMSBlock(), make(mat()), kernels={"default": 1}, tags=("module",))
case("module_sequential", nn.Sequential(nn.Linear(C, C), nn.ReLU(), nn.Dropout(0.1), nn.Softmax(-1)), make(mat()),
     atol=1e-5, rtol=1e-4, tags=("module",))
torch.random.set_rng_state(_generator_state)

# -- Python scalars and keyword arguments --------------------------------------------------------------
case("python_scalar_arg", lambda x, alpha: x * alpha + alpha, make(mat(), scalar(0.75)))
case("keyword_scalar", lambda x, *, scale=1.0: torch.sigmoid(x) * scale, make(mat(), scale=scalar(3.0)))
case("keyword_tensor", lambda x, *, bias: F.silu(x + bias), make(mat(), bias=mat(randn, C)))
case("keyword_dim", lambda x, dim: torch.softmax(x, dim=dim), make(mat(), scalar(0)))
case("list_of_tensors", lambda xs: xs[0] * xs[1] + xs[2], lambda device: (
    ([randn(M, C).to(device) for _ in range(3)],), {}))

# -- extern ops in the middle --------------------------------------------------------------------------
case("matmul_between_chains", lambda x, w, b: F.gelu(torch.relu(x * 2) @ w + b),
     make(mat(), mat(randn, C, 16), mat(randn, 16)), atol=1e-4, rtol=1e-4)
case("bmm_softmax", lambda q, k: torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.125, -1),
     make(mat(randn, 2, M, 16), mat(randn, 2, M, 16)), atol=1e-5, rtol=1e-4)
case("extern_cumsum", lambda x: torch.cumsum(x.exp(), -1) * 2, make(mat()))

# -- matrix products: extern cuBLAS by default; with matmul="triton" one Triton matmul with its epilogue ---------
# (tests/test_matmul.py runs these with matmul="triton"). Odd sizes exercise the tile and K masks.
def _bf16(factory: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    return lambda: factory().to(torch.bfloat16)


case("mm_odd", lambda x, w: x @ w, make(mat(randn, 33, 47), mat(randn, 47, 65)), atol=1e-4, rtol=1e-4,
     kernels={"default": 0}, tags=("matmul",))
case("addmm_bias", lambda b, x, w: torch.addmm(b, x, w), make(mat(randn, 65), mat(randn, 33, 47), mat(randn, 47, 65)),
     atol=1e-4, rtol=1e-4, tags=("matmul",))
case("addmm_scaled", lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
     make(mat(randn, 65), mat(randn, 33, 47), mat(randn, 47, 65)), atol=1e-4, rtol=1e-4, tags=("matmul",))
case("linear_gelu_mm", lambda x, w, b: F.gelu(x @ w + b), make(mat(randn, 33, 47), mat(randn, 47, 65), mat(randn, 65)),
     atol=1e-4, rtol=1e-4, kernels={"default": 1}, tags=("matmul",))
case("linear_gelu_bf16", lambda x, w, b: F.gelu(x @ w + b),
     make(_bf16(mat(randn, 33, 47)), _bf16(mat(randn, 47, 65)), _bf16(mat(randn, 65))), atol=0.1, rtol=0.02,
     kernels={"default": 1}, tags=("matmul",))
case("f_linear_relu", lambda x, w, b: torch.relu(F.linear(x, w, b)),
     make(mat(randn, 33, 47), mat(randn, 65, 47), mat(randn, 65)), atol=1e-4, rtol=1e-4, tags=("matmul",))
case("f_linear_bf16", lambda x, w, b: F.linear(x, w, b),
     make(_bf16(mat(randn, 33, 47)), _bf16(mat(randn, 65, 47)), _bf16(mat(randn, 65))), atol=0.1, rtol=0.02,
     tags=("matmul",))
case("mm_residual", lambda x, w, r: torch.sigmoid(x @ w) * 2 + r,
     make(mat(randn, 33, 47), mat(randn, 47, 65), mat(randn, 33, 65)), atol=1e-4, rtol=1e-4, tags=("matmul",))
case("mm_cast_out", lambda x, w: (x @ w).float() * 0.5,
     make(_bf16(mat(randn, 33, 47)), _bf16(mat(randn, 47, 65))), atol=0.1, rtol=0.02, tags=("matmul",))
case("mm_then_softmax", lambda x, w: torch.softmax(x @ w, -1), make(mat(randn, 33, 47), mat(randn, 47, 65)),
     atol=1e-5, rtol=1e-4, tags=("matmul",))
case("mm_chain", lambda x, w, v: torch.relu(x @ w) @ v + 1.0,
     make(mat(randn, 33, 47), mat(randn, 47, 65), mat(randn, 65, 17)), atol=1e-4, rtol=1e-4, tags=("matmul",))
case("mm_two_outputs", lambda x, w, b: (x @ w + b, F.silu(x @ w + b)),
     make(mat(randn, 33, 47), mat(randn, 47, 65), mat(randn, 65)), atol=1e-4, rtol=1e-4, tags=("matmul",))
case("mm_scalar_tensor", lambda x, w, s: ((x @ w) * s) > 0.5,
     make(mat(randn, 9, 20), mat(randn, 20, 33), lambda: torch.tensor(1.5)), tags=("matmul",))
case("mm_float64", lambda x, w: torch.relu(x @ w), make(lambda: randn(9, 17).double(), lambda: randn(17, 5).double()),
     tags=("matmul",))

_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "case names must be unique"


def find(name: str) -> Case:
    return _BY_NAME[name]


__all__ = ["CASES", "Case", "find", "M", "C"]
