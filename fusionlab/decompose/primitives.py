"""fusionlab's primitive ops: the small set every aten op is decomposed into.

Each pointwise primitive is a row of one table: its arity and the Triton expression it becomes. Operands are
already in the compute dtype (float32 for float16/bfloat16 values). `libdevice` is Triton's libdevice on CUDA and
a numpy-backed stand-in under the interpreter.

    >>> POINTWISE["add"].render(["a", "b"])
    '(a + b)'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PointwisePrimitive:
    """A pointwise primitive and its Triton template (`{0}`, `{1}` are operand expressions)."""

    name: str
    arity: int
    template: str
    returns_bool: bool = False

    def render(self, operands: list[str]) -> str:
        return self.template.format(*operands)


_NAN = "tl.PropagateNan.ALL"

_TABLE: list[tuple[str, int, str]] = [
    ("add", 2, "({0} + {1})"),
    ("sub", 2, "({0} - {1})"),
    ("mul", 2, "({0} * {1})"),
    ("div", 2, "({0} / {1})"),
    # correctly rounded (IEEE) division: Triton's `/` of float32 is an approximate one (PTX div.full.f32, within 2
    # ulp), which a truncation or a floor can turn into a different integer than eager's quotient gives
    ("div_rn", 2, "tl.div_rn({0}, {1})"),
    ("neg", 1, "(-{0})"),
    ("abs", 1, "tl.abs({0})"),
    ("reciprocal", 1, "(1.0 / {0})"),
    ("exp", 1, "tl.exp({0})"),
    ("exp2", 1, "tl.exp2({0})"),
    ("expm1", 1, "libdevice.expm1({0})"),
    ("log", 1, "tl.log({0})"),
    ("log2", 1, "tl.log2({0})"),
    ("log10", 1, "libdevice.log10({0})"),
    ("log1p", 1, "libdevice.log1p({0})"),
    ("sqrt", 1, "tl.sqrt({0})"),
    ("rsqrt", 1, "tl.rsqrt({0})"),
    ("sin", 1, "tl.sin({0})"),
    ("cos", 1, "tl.cos({0})"),
    ("tan", 1, "libdevice.tan({0})"),
    ("asin", 1, "libdevice.asin({0})"),
    ("acos", 1, "libdevice.acos({0})"),
    ("atan", 1, "libdevice.atan({0})"),
    ("sinh", 1, "libdevice.sinh({0})"),
    ("cosh", 1, "libdevice.cosh({0})"),
    ("tanh", 1, "libdevice.tanh({0})"),
    ("asinh", 1, "libdevice.asinh({0})"),
    ("acosh", 1, "libdevice.acosh({0})"),
    ("atanh", 1, "libdevice.atanh({0})"),
    ("erf", 1, "tl.erf({0})"),
    ("erfinv", 1, "libdevice.erfinv({0})"),
    ("sigmoid", 1, "(1.0 / (1.0 + tl.exp(-{0})))"),
    ("floor", 1, "tl.floor({0})"),
    ("ceil", 1, "tl.ceil({0})"),
    ("round", 1, "libdevice.nearbyint({0})"),
    ("trunc", 1, "libdevice.trunc({0})"),
    ("pow", 2, "libdevice.pow({0}, {1})"),
    ("atan2", 2, "libdevice.atan2({0}, {1})"),
    ("fmod", 2, "libdevice.fmod({0}, {1})"),
    ("remainder", 2, "tl.where((libdevice.fmod({0}, {1}) != 0) & ((libdevice.fmod({0}, {1}) < 0) != ({1} < 0)), "
                     "libdevice.fmod({0}, {1}) + {1}, libdevice.fmod({0}, {1}))"),
    ("floor_divide", 2, "_floor_divide({0}, {1})"),  # the preamble's: PyTorch's definition, not floor(a / b)
    ("maximum", 2, f"tl.maximum({{0}}, {{1}}, propagate_nan={_NAN})"),
    ("minimum", 2, f"tl.minimum({{0}}, {{1}}, propagate_nan={_NAN})"),
    ("where", 3, "tl.where({0}, {1}, {2})"),
    ("copy", 1, "{0}"),
    ("sign", 1, "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))"),  # sign(nan) is 0, as in PyTorch
    ("bitwise_and", 2, "({0} & {1})"),
    ("bitwise_or", 2, "({0} | {1})"),
    ("bitwise_xor", 2, "({0} ^ {1})"),
    ("bitwise_not", 1, "(~{0})"),
]

_BOOL_TABLE: list[tuple[str, int, str]] = [
    ("eq", 2, "({0} == {1})"),
    ("ne", 2, "({0} != {1})"),
    ("lt", 2, "({0} < {1})"),
    ("le", 2, "({0} <= {1})"),
    ("gt", 2, "({0} > {1})"),
    ("ge", 2, "({0} >= {1})"),
    ("logical_and", 2, "(({0} != 0) & ({1} != 0))"),
    ("logical_or", 2, "(({0} != 0) | ({1} != 0))"),
    ("logical_xor", 2, "(({0} != 0) ^ ({1} != 0))"),
    ("logical_not", 1, "({0} == 0)"),
    ("isnan", 1, "({0} != {0})"),
    ("isinf", 1, "libdevice.isinf({0})"),
]

POINTWISE: dict[str, PointwisePrimitive] = {
    name: PointwisePrimitive(name, arity, template) for name, arity, template in _TABLE
} | {name: PointwisePrimitive(name, arity, template, True) for name, arity, template in _BOOL_TABLE}

# float32 versions (also for half-precision values, computed in float32): float64 keeps libdevice.
FLOAT32_OVERRIDES: dict[str, str] = {
    "erf": "_erf({0})",  # the preamble's erf (codegen/preamble.py): no per-element coefficient selects
}

# Integer versions where Triton's C-style operators differ from PyTorch's Python-style ones.
INTEGER_OVERRIDES: dict[str, str] = {
    "remainder": "tl.where((({0} % {1}) != 0) & ((({0} % {1}) < 0) != ({1} < 0)), ({0} % {1}) + {1}, {0} % {1})",
    "floor_divide": "(({0} // {1}) - (((({0} % {1}) != 0) & ((({0} % {1}) < 0) != ({1} < 0))).to({0}.dtype)))",
    "fmod": "({0} % {1})",  # Triton's integer % truncates, as C's and fmod do (libdevice.fmod is for floats)
    "abs": "tl.where({0} < 0, -{0}, {0})",
    "sign": "tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0))",
    "logical_not": "({0} == 0)",
    "maximum": "tl.maximum({0}, {1})",
    "minimum": "tl.minimum({0}, {1})",
}

# The reduction primitives, by name. Each reader keeps its own table keyed by these names: code generation the
# masked lanes' identity and the combine step in Triton source, the reference interpreter the torch call
# (`reference.REDUCTION_OPS`; tests/test_reference.py checks it covers them all).
REDUCTIONS: tuple[str, ...] = ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin")

VIEWS: tuple[str, ...] = ("reshape", "expand", "permute", "slice", "select")

# Views a kernel reads through by index arithmetic alone: a broadcast, a size-1 reshape, a reordering of dimensions
# (each dimension still walks one domain dimension). They can fuse; a slice or select needs an offset, a reshape
# that splits or merges dimensions needs a second index space.
INDEX_VIEWS: tuple[str, ...] = ("reshape", "expand", "permute")

# Pointwise-kind primitives outside the table above: each computes an element from its *index* rather than only from
# its operands' elements at the same index, so the kernel writer and the reference interpreter give each its own
# branch. They fuse as pointwise ops do.
#   full   a constant: `full(value=0.0)`, no operand
#   iota   start + step * (the element's index along `dim`): `iota(dim=0, start=0, step=1)`, no operand
#   index  table[i_0, ..., i_K-1] read at computed positions along dims dim..dim+K-1: `index(w, ids, dim=0)`; the
#          index operands are broadcast to the output's shape, the table is read whole from memory
#   pad    the operand shifted by `before` per dim, `value` outside it (negative padding crops): a masked load
#   roll   the operand read at (i - shift) mod n along each rolled dim
#   cat    the operands one after the other along `dim`
#   checked  its index operand, asserted to lie in [0, size): `checked(t, size=5)` (a one-hot scatter's index)
INDEXED: tuple[str, ...] = ("full", "iota", "index", "pad", "roll", "cat", "checked")
