"""The head of every generated kernel module: the Triton helpers its kernels call.

Combine functions for `tl.reduce` that treat NaN as PyTorch does; `_erf`, the float32 erf that float32 and
half-precision values use (`primitives.FLOAT32_OVERRIDES`; its coefficients come from scripts/fit_erf.py); and
the bfloat16 conversions every bfloat16 value goes through. The source views show it above the kernels, so a
reader sees every function a kernel calls.
"""

from __future__ import annotations

# Combine functions for tl.reduce: max/min reductions let NaN win and argmax/argmin take the first NaN, else the
# first extreme value, as PyTorch does (tl.max and tl.argmax ignore NaN).
KERNEL_PREAMBLE = '''import triton
import triton.language as tl

# Triton's interpreter (3.6 to 3.9) converts float32 to bfloat16 by cutting the mantissa, integers and booleans
# by reusing their bits (0 or NaN), and bfloat16 subnormals to float32 wrongly. A module built for it
# (TRITON_INTERPRET=1 while it runs, which is also how Triton picks the interpreter; see runtime/interpreter.py)
# converts with integer operations instead; compiled for a GPU, the native conversion (round to nearest even) stays.
# The module is built for one mode (runtime/interpreter.py sets the variable while it runs this source).
_INTERPRETED = tl.constexpr(__import__("os").environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def _maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _argmax(value_a, index_a, value_b, index_b):
    nan_a = value_a != value_a
    tie = (value_a == value_b) | (nan_a & (value_b != value_b))
    take_a = (value_a > value_b) | (nan_a & (value_b == value_b)) | (tie & (index_a < index_b))
    return tl.where(take_a, value_a, value_b), tl.where(take_a, index_a, index_b)


@triton.jit
def _argmin(value_a, index_a, value_b, index_b):
    nan_a = value_a != value_a
    tie = (value_a == value_b) | (nan_a & (value_b != value_b))
    take_a = (value_a < value_b) | (nan_a & (value_b == value_b)) | (tie & (index_a < index_b))
    return tl.where(take_a, value_a, value_b), tl.where(take_a, index_a, index_b)


@triton.jit
def _erf(a):
    # float32 erf, within 1.04 ulp (scripts/fit_erf.py). libdevice's erff picks its coefficients per element: with
    # many elements per thread that is a register move and a select per coefficient. Here both polynomials run
    # with constant coefficients and one result is picked.
    t = tl.minimum(tl.abs(a), 4.0, propagate_nan=tl.PropagateNan.ALL)  # erf(4) rounds to 1
    s = a * a
    p = 7.898662443039939e-05 * s - 0.0008024809649214149
    p = p * s + 0.005190161522477865
    p = p * s - 0.02685491554439068
    p = p * s + 0.11283617466688156
    p = p * s - 0.3761262893676758
    p = p * s + 0.12837916612625122
    near = p * a + a  # |a| < 1: a + a * P(a^2)
    q = -0.0003032297536265105 * t + 0.004592276643961668
    q = q * t - 0.032873403280973434
    q = q * t + 0.1516224890947342
    q = q * t + 0.9173324108123779
    q = q * t + 0.6280461549758911
    far = 1.0 - tl.exp2(q * (-t) - t)  # |a| >= 1: 1 - 2^(-t - t * Q(t)), then a's sign bit
    far = (far.to(tl.uint32, bitcast=True) | (a.to(tl.uint32, bitcast=True) & 0x80000000)).to(tl.float32, bitcast=True)
    return tl.where(t < 1.0, near, far)


@triton.jit
def _floor_divide(a, b):
    # PyTorch's floor division of floating values (c10::div_floor_floating): from fmod, not floor(a / b), which
    # rounds first (1.0 / 0.1 is 10.0 in float32, 1.0 // 0.1 is 9.0). A zero quotient keeps the sign of a / b;
    # a zero divisor gives a / b.
    mod = libdevice.fmod(a, b)
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1.0, floored)
    floored = tl.where(div == 0, (a / b) * 0.0, floored)  # |a / b| < 1 here: a signed zero
    return tl.where(b == 0, a / b, floored)


@triton.jit
def _bfloat16_bits(a):
    # The bfloat16 nearest to float32 `a` (ties to even), as its 16 bits in a uint32. Exact for subnormals; a
    # carry out of the mantissa rounds up to infinity; NaN stays NaN (PyTorch's quiet NaN, 0x7FC0).
    bits = a.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    return tl.where(a != a, 0x7FC0, bits)


@triton.jit
def _to_bfloat16(a):
    # As PyTorch converts (c10::BFloat16(float)): integers, booleans and float64 become float32 first.
    a = a.to(tl.float32)
    if _INTERPRETED:
        return _bfloat16_bits(a).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return a.to(tl.bfloat16)


@triton.jit
def _round_bfloat16(a):
    # `a` rounded to a bfloat16 value, kept in float32 (kernels compute on bfloat16 values in float32).
    a = a.to(tl.float32)
    if _INTERPRETED:
        return (_bfloat16_bits(a) << 16).to(tl.float32, bitcast=True)
    else:
        return a.to(tl.bfloat16).to(tl.float32)


@triton.jit
def _from_bfloat16(a):
    # bfloat16 is the top half of a float32: exact (the interpreter's own conversion loses subnormals).
    if _INTERPRETED:
        return (a.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return a.to(tl.float32)
'''
