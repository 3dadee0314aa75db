"""The head of every generated kernel module: the Triton helpers its kernels call.

Combine functions for `tl.reduce` that treat NaN as PyTorch does, and `_erf`, the float32 erf that float32 and
half-precision values use (`primitives.FLOAT32_OVERRIDES`; its coefficients come from scripts/fit_erf.py). The
source views show it above the kernels, so a reader sees every function a kernel calls.
"""

from __future__ import annotations

# Combine functions for tl.reduce: max/min reductions let NaN win and argmax/argmin take the first NaN, else the
# first extreme value, as PyTorch does (tl.max and tl.argmax ignore NaN).
KERNEL_PREAMBLE = '''import triton
import triton.language as tl


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
'''
