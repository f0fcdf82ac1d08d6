"""Derivation and measurement of the float64 erf behind exact mode's float32 `T.erf`
(jit/mathlib.py, _ERF_A and _ERF_B), and of fast mode's float32 erf (_ERF32_R, _ERF32_Q,
_EXP32_E). `fit` and `check` need mpmath (`pip install mpmath`; not a tilepy dependency);
`fit32` and `check32` need numpy and scipy only. Not a test.

    .venv/bin/python bench/erf_fit.py fit      # the coefficients, from Chebyshev interpolants
    .venv/bin/python bench/erf_fit.py check    # float64 ulps on samples; every float32 input
    .venv/bin/python bench/erf_fit.py fit32    # fast mode's float32 coefficients
    .venv/bin/python bench/erf_fit.py check32  # fast mode's erf on every float32 in [-4.5, 4.5]

`fit` interpolates erf(sqrt(s)) / sqrt(s) on s in [0, 1] (degree 12) and erfcx = erfc e**s
on |x| in [1, 4] (degree 22) at Chebyshev nodes in 60-digit arithmetic, prints each
interpolant's largest error (the erfcx one weighted by e**-s, as it enters erf) and its
power-basis coefficients in s and in |x| - 2.5, rounded to float64.
`check` measures the float64 error in ulps against mpmath on random and clustered
samples, then runs every non-negative float32 input up to 4 (erf is odd, and from 4 on the
float32 result is 1) through this erf and libm's, and resolves with mpmath each input where
the two round to different float32 values or where libm's value lies near a float32
rounding boundary: the count of float32 results that are not the correctly rounded one.
"""

from __future__ import annotations

import math
import sys
import time
from math import comb

import numpy as np


def _cheb(mp, f, a, b, n):
    """Power-basis coefficients in u in [-1, 1] of f's degree-n Chebyshev interpolant."""
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / (n + 1)) for k in range(n + 1)]
    vals = [f((b - a) / 2 * u + (a + b) / 2) for u in nodes]
    c = [2 * sum(v * mp.cos(mp.pi * j * (k + mp.mpf(1) / 2) / (n + 1))
                 for k, v in enumerate(vals)) / (n + 1) for j in range(n + 1)]
    c[0] /= 2
    rows, p = [[mp.mpf(1)], [mp.mpf(0), mp.mpf(1)]], [mp.mpf(0)] * (n + 1)
    while len(rows) <= n:  # T_j in the power basis: T_j = 2u T_(j-1) - T_(j-2)
        t = [mp.mpf(0)] + [2 * x for x in rows[-1]]
        for i, x in enumerate(rows[-2]):
            t[i] -= x
        rows.append(t)
    for j in range(n + 1):
        for i, x in enumerate(rows[j]):
            p[i] += c[j] * x
    return p


def _max_error(mp, f, p, a, b, weight):
    def value(x):
        u, v = (2 * x - a - b) / (b - a), mp.mpf(0)
        for c in reversed(p):
            v = v * u + c
        return v
    xs = [a + (b - a) * mp.mpf(k) / 2000 for k in range(2001)]
    return max(abs(value(x) - f(x)) * weight(x) for x in xs)


def fit() -> None:
    import mpmath as mp

    mp.mp.dps = 60
    fa = lambda s: mp.erf(mp.sqrt(s)) / mp.sqrt(s) if s else 2 / mp.sqrt(mp.pi)  # noqa: E731
    fb = lambda a: mp.erfc(a) * mp.exp(a * a)  # noqa: E731
    pa, pb = _cheb(mp, fa, 0, 1, 12), _cheb(mp, fb, 1, 4, 22)
    print("A: relative error", mp.nstr(_max_error(mp, fa, pa, 0, 1, lambda s: 1 / fa(s)), 3))
    print("B: absolute error on erfc", mp.nstr(_max_error(mp, fb, pb, 1, 4,
                                                           lambda a: mp.exp(-a * a)), 3))
    qa = [sum(c * comb(i, k) * 2 ** k * (-1) ** (i - k) for i, c in enumerate(pa) if i >= k)
          for k in range(len(pa))]  # u = 2s - 1
    qb = [c / mp.mpf(1.5) ** i for i, c in enumerate(pb)]  # u = (|x| - 2.5) / 1.5
    print("_ERF_A =", tuple(float(x) for x in qa))
    print("_ERF_B =", tuple(float(x) for x in qb))


def _kernels():
    import numba

    from tilepy.jit.mathlib import numba_math

    erf = numba_math()["_erf_to32"]

    @numba.njit
    def each(x, out):
        for i in range(x.size):
            out[i] = erf(np.float64(x[i]))

    @numba.njit
    def scan(top, cand):
        """Inputs (float32 bits 0..top) to resolve: this erf and libm round apart, or
        libm's value lies within 2**-20 float32 ulp of a rounding boundary."""
        n = 0
        for b in range(top + 1):
            x = np.float64(np.uint32(b).view(np.float32))
            y, z = erf(x), math.erf(x)
            fz = np.float32(z)
            u = np.float64(np.spacing(np.float32(abs(fz))))
            near = abs(abs(abs(z) - abs(np.float64(fz))) - 0.5 * u) < u * 2.0 ** -20
            if np.float32(y) != fz or near:
                cand[n] = b
                n += 1
        return n

    return each, scan


def _correct32(mp, x: float) -> np.float32:
    """The correctly rounded float32 erf(x) (a float64 value on a float32 boundary is
    settled by the 50-digit value's side of it)."""
    t = mp.erf(mp.mpf(x))
    f64 = float(t)
    c = np.float32(f64)
    for o in (np.nextafter(c, np.float32(-2)), np.nextafter(c, np.float32(2))):
        mid = (float(c) + float(o)) / 2
        if f64 == mid and (t - mid) * (float(o) - float(c)) > 0:
            return o
    return c


def check() -> None:
    import mpmath as mp

    mp.mp.dps = 50
    each, scan = _kernels()
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-4, 4, 40000), rng.uniform(0.95, 1.05, 5000),
                        10.0 ** rng.uniform(-40, 0.6, 5000)]).astype(np.float32)
    y = np.empty(x.size)
    each(x, y)
    worst = max((abs(mp.mpf(float(v)) - mp.erf(mp.mpf(float(a)))) / float(np.spacing(abs(v))),
                 float(a)) for a, v in zip(x, y) if abs(a) <= 4)
    print(f"float64 error: at most {mp.nstr(worst[0], 3)} ulp (x = {worst[1]!r}), "
          f"{x.size} samples")
    top = int(np.float32(4.0).view(np.uint32))
    t0 = time.process_time()
    cand = np.empty(1 << 22, np.int64)
    n = scan(top, cand)
    xs = cand[:n].astype(np.uint32).view(np.float32)
    ys = np.empty(n)
    each(xs, ys)
    want = [_correct32(mp, float(a)) for a in xs]
    ours = sum(np.float32(v) != w for v, w in zip(ys, want))
    libm = sum(np.float32(math.erf(float(a))) != w for a, w in zip(xs, want))
    print(f"every float32 in [0, 4] ({top + 1} inputs, {n} resolved with mpmath, "
          f"{time.process_time() - t0:.0f} s): not correctly rounded: this erf {ours}, "
          f"libm {libm}")


if __name__ == "__main__":
    from erf_fit32 import check32, fit32

    {"fit": fit, "check": check, "fit32": fit32, "check32": check32}[
        sys.argv[1] if len(sys.argv) > 1 else "check"]()
