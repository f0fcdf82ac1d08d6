"""Cheaper float64 exps for exact mode's float32 `T.exp`, measured against jit/mathlib.py's
`_exp_to32` (issue #18, exact softmax): speed in a loop like the softmax's exp pass, and the
float32 results on every float32 argument. Not a test; needs mpmath only for `fit`.

    .venv/bin/python bench/exp_forms.py time    # ns per element, one thread CPU
    .venv/bin/python bench/exp_forms.py check   # every float32 in [-104, 89]: differences
    .venv/bin/python bench/exp_forms.py fit     # the candidate's coefficients (mpmath)

The forms: `current` (_exp_to32: degree-13 Taylor, Estrin), `minimax11` (the same range
reduction and final steps, exp(r) - 1 - r = r**2 q(r) with q the degree-9 Chebyshev
interpolant on |r| <= 0.34658, Horner), and `reduction` (range reduction and scaling with
exp(r) ~ 1 + r: not an exp, the floor under any polynomial). `check` compares each form's
float32 rounding with the current one's and with numpy's float64 exp rounded to float32
(the interpreter's definition) on all 2,239,889,410 float32 arguments in [-104, 89];
below -104 and above 89 every form clamps and gives 0 or inf.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

# q(r) = (exp(r) - 1 - r) / r**2, degree 9, from `fit` (relative error of 1 + r + r**2 q
# on |r| <= 0.34658: 1.6e-17)
Q9 = (0.5000000000000001, 0.16666666666666669, 0.04166666666662416, 0.008333333333330063,
      0.0013888888917199863, 0.00019841269863042963, 2.4801521317484083e-05,
      2.7557268476553695e-06, 2.7620078203806394e-07, 2.5100377619606372e-08)
HALF_LN2 = 0.34658  # a little over ln 2 / 2: rint's reduction can land just past it


def fit(degree: int = 9) -> None:
    import mpmath as mp
    from erf_fit import _cheb

    mp.mp.dps = 60
    a = mp.mpf(HALF_LN2)
    p = _cheb(mp, lambda r: (mp.exp(r) - 1 - r) / r**2 if r else mp.mpf(1) / 2, -a, a, degree)
    c = [float(p[i] / a**i) for i in range(degree + 1)]
    err = max(abs((1 + r + r * r * mp.polyval(c[::-1], r)) / mp.exp(r) - 1)
              for r in (-a + 2 * a * k / 800 for k in range(801)))
    print(f"degree {degree}: relative error {mp.nstr(err, 3)}\n{tuple(c)!r}")


def forms() -> dict:
    """The njit float64 -> float64 forms by name."""
    import numba

    from tilepy.jit.mathlib import _CLAMP, _INV_LN2, _LN2_HI, _LN2_LO, _fma_rint, numba_math
    from tilepy.precision.bits import bits_f64, f64_bits

    fma, rint = _fma_rint(64)
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 = Q9
    i52 = np.int64(52)

    @numba.njit(inline="always")
    def minimax11(x):
        xc = min(max(x, -_CLAMP), _CLAMP)
        n = rint(xc * _INV_LN2)
        r = fma(-n, _LN2_LO, fma(-n, _LN2_HI, xc))
        q = fma(fma(fma(fma(fma(fma(fma(fma(fma(c9, r, c8), r, c7), r, c6), r, c5), r, c4),
                                r, c3), r, c2), r, c1), r, c0)
        y = 1.0 + fma(r * r, q, r)
        y = bits_f64(f64_bits(y) + np.uint64(np.int64(n) << i52))
        return x if x != x else y

    @numba.njit(inline="always")
    def reduction(x):
        xc = min(max(x, -_CLAMP), _CLAMP)
        n = rint(xc * _INV_LN2)
        y = 1.0 + fma(-n, _LN2_LO, fma(-n, _LN2_HI, xc))
        y = bits_f64(f64_bits(y) + np.uint64(np.int64(n) << i52))
        return x if x != x else y

    return {"current": numba_math()["_exp_to32"], "minimax11": minimax11,
            "reduction": reduction}


def _loops(fs: dict) -> dict:
    """Per form: y[i] = float32(exp(float64(x[i] - m))), the softmax's exp pass."""
    import numba

    def loop(f):
        @numba.njit(error_model="numpy")
        def run(x, m, y):
            for i in range(x.shape[0]):
                y[i] = np.float32(f(np.float64(x[i] - m)))
        return run
    return {k: loop(f) for k, f in fs.items()}


def time_forms(rounds: int = 15) -> None:
    runs = _loops(forms())
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1 << 20) * 3).astype(np.float32)
    m, y = np.float32(x.max()), np.empty_like(x)
    best = dict.fromkeys(runs, math.inf)
    for _ in range(rounds):  # alternating rounds, minimum of each
        for k, f in runs.items():
            for _ in range(5):
                t0 = time.process_time()
                f(x, m, y)
                best[k] = min(best[k], time.process_time() - t0)
    for k, v in best.items():
        print(f"{k}: {v / x.size * 1e9:.3f} ns per element")


def check() -> None:
    runs = _loops({k: f for k, f in forms().items() if k != "reduction"})
    ranges = ((0x80000000, int(np.float32(-104.0).view(np.uint32))),  # -0 down to -104
              (0, int(np.float32(89.0).view(np.uint32))))  # +0 up to 89
    diff, total, t0, chunk = dict.fromkeys(list(runs) + ["numpy"], 0), 0, time.time(), 1 << 24
    zero = np.float32(0)
    for lo, hi in ranges:
        for s in range(lo, hi + 1, chunk):
            x = np.arange(s, min(s + chunk, hi + 1), dtype=np.uint64).astype(np.uint32)
            x = x.view(np.float32)
            ref, y = np.empty_like(x), np.empty_like(x)
            runs["current"](x, zero, ref)
            for k, f in runs.items():
                f(x, zero, y)
                diff[k] += int(np.count_nonzero(y.view(np.uint32) != ref.view(np.uint32)))
            with np.errstate(over="ignore"):
                y = np.exp(x.astype(np.float64)).astype(np.float32)
            diff["numpy"] += int(np.count_nonzero(y.view(np.uint32) != ref.view(np.uint32)))
            total += x.size
    print(f"{total} float32 arguments in [-104, 89], {time.time() - t0:.0f} s")
    for k, v in diff.items():
        print(f"{k}: {v} float32 results differ from the current exp's")


if __name__ == "__main__":
    from tilepy.precision.numba_target import configure

    configure()  # 512-bit vectors, as the JIT compiles
    what = sys.argv[1] if len(sys.argv) > 1 else "time"
    {"time": time_forms, "check": check, "fit": fit}[what]()
