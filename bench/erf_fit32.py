"""Fast mode's float32 erf (jit/mathlib.py, _ERF32_R, _ERF32_Q, _EXP32_E): the fit of its
coefficients and its measurement on every float32 input. numpy and scipy only; run through
bench/erf_fit.py (`fit32`, `check32`). Not a test.

`fit32` fits each polynomial by Lawson's iteration (iteratively reweighted least squares,
which converges to the weighted minimax polynomial on the grid) over 6,000 Chebyshev points,
in float64, then rounds the coefficients to float32 one at a time from the constant term
up, refitting the rest after each rounding, so the rounding of one is absorbed by the
others. Reference values: scipy.special's erf and erfcx and numpy's expm1 (float64).
Each error printed is in units of 2**-24 of the final result (the scheme is in mathlib.py):
  R: erf(a)/a - 1 in s = a**2 on [0, split**2], relative to erf(a)/a;
  Q: erfcx(a) in a - mid on [split, clamp], weighted by e**-a**2 (absolute on erfc);
  E: (e**r - 1 - r) / r**2 on |r| <= ln2/2 (+ a little), weighted by r**2 e**-r (relative).
`check32` runs every float32 in [-4.5, 4.5] through the fast form (as fast kernels inline
it: fast-math on) against libm's float64 erf, in units of the correctly rounded float32's
ulp (the measure of tests/jit/test_vector_paths.py), then times it per element.
"""

from __future__ import annotations

import math
import time

import numpy as np

DEGREES = {"R": 6, "Q": 9, "E": 4}


def lawson(A, y, w, iters=300):
    """Coefficients c minimising max |(A c - y) w| on the grid, and that maximum."""
    lam = np.full(len(y), 1.0 / len(y))
    for _ in range(iters):
        sw = np.sqrt(lam) * w
        c = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)[0]
        lam = lam * np.abs((A @ c - y) * w)
        lam /= lam.sum()
    return c, float(np.max(np.abs((A @ c - y) * w)))


def fit_f32(t, y, w, deg):
    """Power-basis coefficients in t (float32), rounded one at a time with refits, and the
    weighted error of the float64 fit and of the float32 coefficients."""
    h = float(np.max(np.abs(t)))
    res, out, first = y.copy(), [], None
    for k in range(deg + 1):
        A = np.stack([(t / h) ** j for j in range(k, deg + 1)], 1)
        c, err = lawson(A, res, w)
        first = err if first is None else first
        ck = np.float32(c[0] / h ** k)
        out.append(ck)
        res = res - np.float64(ck) * t ** k
    return out, first, float(np.max(np.abs(res * w)))


def _grid(lo, hi, n=6000):
    k = np.arange(n)
    mid = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    return np.concatenate([mid, [lo, hi]])


def fits() -> dict:
    """name -> (float32 coefficients, float64 fit error, float32 fit error), in 2**-24."""
    from scipy.special import erf, erfcx

    from tilepy.jit.mathlib import _ERF32_CLAMP, _ERF32_MID, _ERF32_SPLIT

    s = _grid(0.0, _ERF32_SPLIT ** 2)
    a = np.sqrt(s)
    f = np.where(a > 0, erf(a) / np.where(a > 0, a, 1.0), 2 / math.sqrt(math.pi))
    out = {"R": fit_f32(s, f - 1, 1 / f, DEGREES["R"])}
    a = _grid(_ERF32_SPLIT, _ERF32_CLAMP)
    out["Q"] = fit_f32(a - _ERF32_MID, erfcx(a), np.exp(-a * a), DEGREES["Q"])
    h = math.log(2.0) / 2 + 1e-3
    r = _grid(-h, h)
    r = r[r != 0]
    out["E"] = fit_f32(r, (np.expm1(r) - r) / r ** 2, r ** 2 / np.exp(r), DEGREES["E"])
    return {k: (c, e0 * 2 ** 24, e1 * 2 ** 24) for k, (c, e0, e1) in out.items()}


def fit32() -> None:
    for name, (c, e64, e32) in fits().items():
        print(f"{name}: error {e64:.4f} (float64 coefficients), {e32:.4f} (float32)")
        print(f"_{'EXP32' if name == 'E' else 'ERF32'}_{name} = ({', '.join(map(str, c))})")


def _kernels():
    import numba

    from tilepy.jit.fast import options as fast_options
    from tilepy.jit.mathlib import fast_numba_math, numba_math
    from tilepy.precision.bits import bits_f32, f32_bits

    ferf, erf64 = fast_numba_math()["_ferf32"], numba_math()["_erf_to32"]

    @numba.njit(**fast_options())  # fast mode's flags, as its kernels inline _ferf32
    def fast(x, out):
        for i in range(x.shape[0]):
            out[i] = ferf(x[i])

    @numba.njit
    def exact(x, out):
        for i in range(x.shape[0]):
            out[i] = np.float32(erf64(np.float64(x[i])))

    @numba.njit
    def libm(x, out):
        for i in range(x.shape[0]):
            out[i] = np.float32(math.erf(np.float64(x[i])))

    @numba.njit
    def errors(x, got):
        """(largest error in ulps, its x, count over 1/2 ulp, count over 1 ulp)."""
        worst, wx, half, one = 0.0, np.float32(0), 0, 0
        for i in range(x.shape[0]):
            t = math.erf(np.float64(x[i]))
            a = abs(np.float32(t))
            if a == 0:
                continue
            ulp = np.float64(bits_f32(np.uint32(f32_bits(a) + np.uint32(1)))) - np.float64(a)
            e = abs(np.float64(got[i]) - t) / ulp
            half += e > 0.5
            one += e > 1.0
            if e > worst:
                worst, wx = e, x[i]
        return worst, wx, half, one

    return fast, exact, libm, errors


def check32() -> None:
    fast, exact, libm, errors = _kernels()
    t0, top = time.process_time(), int(np.float32(4.5).view(np.uint32))
    worst, wx, half, one, n = 0.0, 0.0, 0, 0, 0
    for sign in (0, 1 << 31):
        for start in range(0, top + 1, 1 << 24):
            x = (np.arange(start, min(start + (1 << 24), top + 1), dtype=np.int64)
                 + sign).astype(np.uint32).view(np.float32)
            got = np.empty_like(x)
            fast(x, got)
            w, at, h, o = errors(x, got)
            worst, wx = (w, at) if w > worst else (worst, wx)
            half, one, n = half + h, one + o, n + x.size
    print(f"every float32 in [-4.5, 4.5] ({n} inputs, {time.process_time() - t0:.0f} s): "
          f"at most {worst:.4f} ulp (x = {float(wx)!r}); {half} over 1/2 ulp, {one} over 1")
    x = np.random.default_rng(0).uniform(-4, 4, 1 << 22).astype(np.float32)
    out, best = np.empty_like(x), {}
    for _ in range(15):  # alternating rounds, min of one-thread CPU time
        for name, f in (("fast", fast), ("exact", exact), ("libm", libm)):
            t = time.process_time()
            f(x, out)
            best[name] = min(best.get(name, 1e9), time.process_time() - t)
    print("ns per element (njit loop over 4 M float32, one thread, CPU, min of 15): " +
          ", ".join(f"{k} {v / x.size * 1e9:.3f}" for k, v in best.items()))
