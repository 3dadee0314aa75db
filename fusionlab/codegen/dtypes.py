"""Values in Triton source: dtype names, Python numbers as literals of a dtype, conversions between dtypes.

Half-precision values are computed in float32 inside a kernel and rounded where PyTorch would round them; these
helpers spell that out once for the kernel writer.

    >>> literal(0.1, torch.float64)
    'tl.full([], 0.1, tl.float64)'
"""

from __future__ import annotations

import torch

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}

HALF_DTYPES = (torch.float16, torch.bfloat16)

# Ops whose Python-number operand PyTorch keeps at float32 precision for half-precision tensors (its kernels read
# it with `original_scalar_value`); other ops convert the number to the tensor's dtype first, so that `h > 1.1` on
# bfloat16 compares with 1.1015625 (checked against eager on CPU: add, sub, comparisons, fmod, remainder, pow).
# floor_divide keeps it only as the divisor: `-0.7 // h` rounds -0.7 to h's dtype first.
UNROUNDED_SCALAR_OPS = frozenset({"mul", "div", "div_rn", "floor_divide"})


def literal(value: object, dtype: torch.dtype, op: str = "", position: int = 1) -> str:
    """A Python number as a Triton literal of `dtype` (a value's own dtype; half precision computes in float32);
    `position` is its place among `op`'s operands."""
    if isinstance(value, bool):
        return "1" if value else "0"
    unrounded = op in UNROUNDED_SCALAR_OPS and not (op == "floor_divide" and position == 0)
    if dtype in HALF_DTYPES and not unrounded:
        value = float(torch.tensor(float(value), dtype=torch.float64).to(dtype))  # type: ignore[arg-type]
    if dtype.is_floating_point:
        number = float(value)  # type: ignore[arg-type]
        text = repr(number)
        if number != number:
            text = 'float("nan")'
        elif number in (float("inf"), float("-inf")):
            text = 'float("inf")' if number > 0 else 'float("-inf")'
        if dtype == torch.float64:
            # Triton makes a Python float a float32 constant: 0.1 would lose its float64 digits, and libdevice's
            # fmod(a, 2.0) would run in float32.
            return f"tl.full([], {text}, tl.float64)"
        return text
    return repr(int(value))  # type: ignore[call-overload]


def convert(expr: str, source: torch.dtype, target: torch.dtype) -> str:
    """`expr` (computed in `source`) converted to `target`, kept in `target`'s compute dtype.

    PyTorch converts to a half dtype through float32 (c10::Half(float), c10::BFloat16(float)): float64 and integer
    values are rounded to float32 first, then to the half dtype. bfloat16 goes through the preamble's helpers,
    which Triton's interpreter cannot get wrong."""
    if target == torch.bfloat16:
        return f"_round_bfloat16({expr})"
    if target == torch.float16:
        widened = expr if source == torch.float32 else f"{expr}.to(tl.float32)"
        return f"{widened}.to(tl.float16).to(tl.float32)"
    return f"{expr}.to({TRITON_DTYPES[target]})"
