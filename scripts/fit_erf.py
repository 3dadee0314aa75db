"""Fits the coefficients of `_erf`, the float32 erf in every generated kernel module (codegen/preamble.py).

libdevice's erff evaluates one polynomial whose coefficients it picks per element (|x| below or above 1). In a
Triton kernel each thread holds many elements, so every coefficient becomes a register move and a select per
element: 37.6 SASS instructions per element for gelu(x+b), most of them moves. `_erf` evaluates both polynomials
with constant coefficients (fused multiply-adds with immediates) and picks one result:

    |x| < 1:  erf(x) = x + x * P(x^2)                          P of degree 6, P(0) = 2/sqrt(pi) - 1
    |x| >= 1: erf(x) = sign(x) * (1 - 2^(-t - t * Q(t)))       Q of degree 5, t = min(|x|, 4): erf(4) rounds to 1

Each polynomial is a weighted minimax fit (Lawson's iteration over weighted least squares): relative error of erf
on the first piece, absolute error on the second (where erf is near 1). The script prints the coefficients as
float32 literals and the largest error, in float32 ulps, of the float32 evaluation (fused multiply-adds, exact
exp2) over 3 million arguments in [-5, 5].

    python scripts/fit_erf.py
"""

from __future__ import annotations

import math

import numpy as np

SPLIT = 1.0
TOP = 4.0
SMALL_DEGREE = 6
LARGE_DEGREE = 5

erf = np.vectorize(math.erf)
erfc = np.vectorize(math.erfc)


def lawson(basis: np.ndarray, target: np.ndarray, weight: np.ndarray, iterations: int = 400) -> np.ndarray:
    """Coefficients c that minimise max |weight * (basis @ c - target)|."""
    w = np.full(len(target), 1.0 / len(target))
    c = np.zeros(basis.shape[1])
    for _ in range(iterations):
        root = np.sqrt(w) * weight
        c = np.linalg.lstsq(basis * root[:, None], target * root, rcond=None)[0]
        w = w * np.abs(weight * (basis @ c - target))
        w /= w.sum()
    return c


def fit_small() -> list[float]:
    x = np.linspace(1e-4, SPLIT, 20000)
    s = x * x
    p0 = 2 / math.sqrt(math.pi) - 1
    basis = np.stack([s ** k for k in range(1, SMALL_DEGREE + 1)], axis=1)
    c = lawson(basis, erf(x) / x - 1.0 - p0, x / erf(x))
    return [p0, *c]


def fit_large() -> list[float]:
    t = np.linspace(SPLIT, TOP, 20000)
    basis = np.stack([t ** k for k in range(LARGE_DEGREE + 1)], axis=1)
    return list(lawson(basis, -np.log2(erfc(t)) / t - 1.0, erfc(t) * t * math.log(2)))


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 a * b + c rounded once (a float32 product is exact in float64)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def evaluate(small: list[float], large: list[float], x: np.ndarray) -> np.ndarray:
    """`_erf` in float32, as the kernel computes it."""
    t = np.minimum(np.abs(x), np.float32(TOP))
    s = x * x
    p = np.full_like(x, np.float32(small[-1]))
    for c in small[-2::-1]:
        p = _fma(p, s, np.float32(c))
    q = np.full_like(x, np.float32(large[-1]))
    for c in large[-2::-1]:
        q = _fma(q, t, np.float32(c))
    q = _fma(q, -t, -t)
    far = np.copysign(np.float32(1) - np.exp2(q.astype(np.float64)).astype(np.float32), x)
    return np.where(t < np.float32(SPLIT), _fma(p, x, x), far)


def main() -> None:
    small, large = fit_small(), fit_large()
    print("P:", ", ".join(repr(float(np.float32(c))) for c in small))
    print("Q:", ", ".join(repr(float(np.float32(c))) for c in large))
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-5, 5, 2_000_000), rng.uniform(-1e-3, 1e-3, 200_000),
                        np.linspace(-4.5, 4.5, 1_000_001)]).astype(np.float32)
    exact = erf(x.astype(np.float64))
    error = np.abs(evaluate(small, large, x) - exact) / np.spacing(np.abs(exact).astype(np.float32))
    print(f"largest error {error.max():.3f} ulp at x = {x[np.argmax(error)]!r}, mean {error.mean():.3f} ulp")


if __name__ == "__main__":
    main()
