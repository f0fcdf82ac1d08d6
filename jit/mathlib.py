"""Vectorisable exp, exp2, tanh and erf for the numba tier: float64 ones for float32-or-narrower
results (every mode), and fast mode's float32 ones (FAST_F32: exp and exp2 within 2 ulp,
erf within 1).

The numerics contract computes transcendentals in float64 and rounds once to the result
dtype; libm's `exp` is a call per element, which LLVM cannot vectorise. The float64 `exp`
here is within 1.04 ulp of the true exp (the test measures it against long double), so a
result rounded to float32 equals the correctly rounded one unless the true value lies
within about 2**-52 (relative) of a float32 rounding boundary: the contract's "rare ties",
roughly 1 in 10**8 random inputs. float64 results keep libm, whose results agree with
numpy's except in rare ties (this `exp` would not). The py tier uses numpy's exp and exp2.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# The float64 scheme (exp_to32 and exp2_to32 below):
#     n = rint(x / ln2)                  llvm.rint: not undone by fast-math reassociation
#     r = x - n * ln2                    two fused steps with ln2 split in hi + lo
#     exp(r) = 1 + r + r**2 * q(r)       |r| <= ln2 / 2; q: Taylor terms 1/2! .. 1/13!, Estrin
#     exp(x) = 2**n * exp(r)             n added to the exponent field
# exp2 reduces exactly (x = n + r, |r| <= 1/2, r = x - n has no rounding error), then
# evaluates exp(r * ln2) with the same polynomial; r * ln2 is rounded once (fma with ln2 in
# hi + lo), which adds under 0.1 ulp. The argument is clamped to [-200, 200] (exp2: [-300,
# 300]) first, so the scaling never leaves the normal range: exp(-200) ~ 1.4e-87 and
# exp(200) ~ 7e86 round to 0 and inf in float32 as every x beyond them does. NaN passes
# through. rint and fma are LLVM intrinsics (exactly rounded, the same bits on every
# machine, in software where the CPU lacks FMA), so fast mode's flags cannot undo the range
# reduction (a `(x + 1.5 * 2**52) - 1.5 * 2**52` rounding trick would be reassociated away).
# This FMA implements one float64 function, as libm's own exp does; it is not a contraction
# of the kernel's arithmetic, which stays FMA-free.

# tanh (tanh_to32) for float32-or-narrower results, from the same pieces:
#     tanh(|x|) = -em / (2 + em),  em = exp(-2|x|) - 1 = 2**n (exp(r) - 1) + (2**n - 1)
# exp(r) - 1 comes from the polynomial without the leading 1, so there is no cancellation
# near 0, and em lies in (-1, 0] where no step cancels much: within 2.6 ulp of the true
# tanh (the test measures it against long double), so the result rounded to float32 is the
# correctly rounded one except in rare ties, as for exp. |x| is clamped to 18 first
# (tanh(18) = 1 - 4.6e-16 rounds to 1 in float32, as tanh does from 9.01 on; 2**n - 1 is
# then exact, n >= -52); the sign is x's, so tanh(-0) is -0; NaN passes through. Unlike
# libm's tanh (a call per element), LLVM vectorises it.
_TANH_CLAMP = 18.0
_ABS64, _SIGN64 = np.uint64(0x7FFFFFFFFFFFFFFF), np.uint64(0x8000000000000000)

# Taylor coefficients 1/k!, k = 2..13: |r| <= 0.3466 leaves r**14 / 14! < 5e-18.
_C = [1.0 / math.factorial(k) for k in range(2, 14)]
_INV_LN2 = 1.4426950408889634  # 1 / ln 2, rounded to float64
_LN2_HI = 0.6931471805599453  # ln 2 rounded to float64 ...
_LN2_LO = 2.3190468138462996e-17  # ... and the rest: ln 2 - _LN2_HI, to float64
_CLAMP = 200.0
_CLAMP2 = 300.0  # 2**-300 and 2**300 are 0 and inf in float32, as every x beyond them


# erf (erf_to32) for float32-or-narrower results, in float64 from a float32-exact argument:
#     |x| <= 1:      erf(x) = x A(s),                 s = x**2 (exact: x has 24 bits)
#     1 < |x| <= 4:  erf(x) = 1 - exp(-s) B(|x| - 2.5), B approximating erfcx = erfc e**s
#     |x| > 4:       as at 4, whose result rounds to 1 in float32 (erfc(4) ~ 1.5e-8 < 2**-25)
# A and B are the Chebyshev interpolants of erf(sqrt(s)) / sqrt(s) on s in [0, 1] (degree
# 12) and of erfcx on [1, 4] (degree 22), at Chebyshev nodes, moved to the power basis of s
# and of |x| - 2.5 (both exact arguments) and rounded to float64 (bench/erf_fit.py derives
# them with mpmath). Interpolation error: 1.5e-19 relative (A) and 9.4e-18 absolute on
# erfc (B, weighted by e**-s), so the result is within 1.5 float64 ulp (measured) and rounds to
# float32 like the correctly rounded erf except in rare ties (docs/jit.md gives the
# measurements). Both branches are computed and one selected, so LLVM vectorises it where
# libm's erf is a call per element.
_ERF_A = (
    1.1283791670955126, -0.3761263890318375, 0.11283791670954879, -0.026866170645076792,
    0.0052239776248180145, -0.000854832698083379, 0.0001205533111164271,
    -1.4925595266831182e-05, 1.6461000484121368e-06, -1.6350312701054695e-07,
    1.4659775274047436e-08, -1.1372848856791674e-09, 5.957176147748911e-11)
_ERF_B = (
    0.2108063640611436, -0.07434734678979495, 0.02493799708665696, -0.008001569382090781,
    0.0024670368156992977, -0.0007335909372640017, 0.00021101982430921638,
    -5.8868964030705185e-05, 1.5961853006132e-05, -4.214297919719682e-06,
    1.0852230313786508e-06, -2.7294910415707813e-07, 6.713949125870635e-08,
    -1.617358802372231e-08, 3.817410913620512e-09, -8.807216258471182e-10,
    2.0031019435942918e-10, -4.633682738083616e-11, 1.0146551782430207e-11,
    -1.6954156353454019e-12, 3.6677267755511203e-13, -1.6538069435089902e-13,
    3.3641269918883144e-14)

@lru_cache(maxsize=None)
def _fma_rint(bits: int):
    """Numba intrinsics (fma, rint) of float`bits`: `a * b + c` rounded once
    (llvm.fma) and x rounded to an integer, ties to even (llvm.rint)."""
    from llvmlite import ir as llvm_ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    ty, lty = (types.float32, llvm_ir.FloatType()) if bits == 32 else \
        (types.float64, llvm_ir.DoubleType())

    def call(name: str, arity: int):
        def codegen(context, builder, signature, args):
            fn = cgutils.get_or_insert_function(
                builder.module, llvm_ir.FunctionType(lty, [lty] * arity), name)
            return builder.call(fn, args)

        return codegen

    @intrinsic
    def fma(typingctx, a, b, c):
        return ty(ty, ty, ty), call(f"llvm.fma.f{bits}", 3)

    @intrinsic
    def rint(typingctx, x):
        return ty(ty), call(f"llvm.rint.f{bits}", 1)

    return fma, rint


@lru_cache(maxsize=None)
def numba_math() -> dict:
    """The njit helpers by name, for the numba tier's namespace (imports numba)."""
    import numba

    from tilepy.precision.bits import bits_f64, f64_bits

    fma, rint = _fma_rint(64)

    c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = _C
    I52 = np.int64(52)

    @numba.njit(inline="always")
    def expm1_reduced(r):
        """exp(r) - 1 for |r| <= ln2/2 (a little more is fine): r + r**2 * q(r)."""
        r2 = r * r
        r4 = r2 * r2
        hi = fma(fma(c13, r, c12), r2, fma(c11, r, c10))
        mid = fma(fma(c9, r, c8), r2, fma(c7, r, c6))
        lo = fma(fma(c5, r, c4), r2, fma(c3, r, c2))
        q = fma(fma(hi, r4, mid), r4, lo)
        return fma(r2, q, r)

    @numba.njit(inline="always")
    def exp_reduced(r, n):
        """2**n * exp(r) for |r| <= ln2/2 (a little more is fine) and integer |n| <= 300."""
        y = 1.0 + expm1_reduced(r)
        return bits_f64(f64_bits(y) + np.uint64(np.int64(n) << I52))  # n into the exponent

    @numba.njit(inline="always")
    def exp_to32(x):
        xc = min(max(x, -_CLAMP), _CLAMP)
        n = rint(xc * _INV_LN2)
        y = exp_reduced(fma(-n, _LN2_LO, fma(-n, _LN2_HI, xc)), n)
        return x if x != x else y

    @numba.njit(inline="always")
    def exp2_to32(x):
        xc = min(max(x, -_CLAMP2), _CLAMP2)
        n = rint(xc)
        r = xc - n  # exact: |r| <= 1/2
        y = exp_reduced(fma(r, _LN2_HI, r * _LN2_LO), n)
        return x if x != x else y

    @numba.njit(inline="always", error_model="numpy")
    def tanh_to32(x):
        a = min(bits_f64(f64_bits(x) & _ABS64), _TANH_CLAMP)  # |x|, clamped
        y = -2.0 * a  # exact
        n = rint(y * _INV_LN2)
        p = expm1_reduced(fma(-n, _LN2_LO, fma(-n, _LN2_HI, y)))
        s = bits_f64(f64_bits(1.0) + np.uint64(np.int64(n) << I52))  # 2**n, n in [-52, 0]
        em = fma(s, p, s - 1.0)  # exp(-2|x|) - 1 in (-1, 0]; s - 1 is exact
        t = bits_f64(f64_bits(-em / (2.0 + em)) & _ABS64)
        t = bits_f64(f64_bits(t) | (f64_bits(x) & _SIGN64))  # x's sign (tanh(-0) is -0)
        return x if x != x else t

    return {"_exp_to32": exp_to32, "_exp2_to32": exp2_to32, "_tanh_to32": tanh_to32,
            "_erf_to32": _erf64(fma, exp_to32)}


def _horner(fma, coeffs: tuple):
    """An njit polynomial with these (lowest first) coefficients, of the fma's float type
    (float64 or float32), Horner's scheme in fma steps, written out (a loop over a tuple
    would not vectorise)."""
    import numba

    names = [f"c{i}" for i in range(len(coeffs))]
    expr = names[-1]
    for n in reversed(names[:-1]):
        expr = f"fma({expr}, t, {n})"
    ns = {"fma": fma, **dict(zip(names, coeffs))}
    exec(f"def poly(t):\n    return {expr}\n", ns)  # noqa: S102 (built from constants)
    return numba.njit(inline="always")(ns["poly"])


def _erf64(fma, exp64):
    """erf for float32-or-narrower results (njit; the scheme is at _ERF_A above)."""
    import numba

    from tilepy.precision.bits import bits_f64, f64_bits

    poly_a, poly_b = _horner(fma, _ERF_A), _horner(fma, _ERF_B)

    @numba.njit(inline="always", error_model="numpy")
    def erf_to32(x):
        a = min(bits_f64(f64_bits(x) & _ABS64), 4.0)  # |x|, clamped
        s = a * a  # exact for a float32 argument
        y = a * poly_a(s) if a <= 1.0 else 1.0 - exp64(-s) * poly_b(a - 2.5)
        y = bits_f64(f64_bits(y) | (f64_bits(x) & _SIGN64))  # x's sign (erf(-0) is -0)
        return x if x != x else y

    return erf_to32


def py_math() -> dict:
    """The same helpers for the py tier (no Numba): numpy's float64 exp, exp2 and tanh,
    scipy's erf."""
    from tilepy.ir.scalar import _py_erf as scalar_erf

    return {"_exp_to32": lambda x: np.float64(np.exp(np.float64(x))),
            "_exp2_to32": lambda x: np.float64(np.exp2(np.float64(x))),
            "_tanh_to32": lambda x: np.float64(np.tanh(np.float64(x))),
            "_erf_to32": scalar_erf}


# ------------------------------------------------------------------ fast mode: float32 exp

# Taylor coefficients 1/k!, k = 2..7, for float32: |r| <= ln2/2 leaves r**8 / 8! < 5.6e-9,
# under 0.1 ulp of a result in [0.7, 1.5).
_C32 = [1.0 / math.factorial(k) for k in range(2, 8)]
# exp2's polynomial in r itself: 2**r = sum (r ln2)**k / k!, the same truncation for |r| <= 1/2
_C2_32 = [math.log(2.0) ** k / math.factorial(k) for k in range(1, 8)]
_LN2_HI32 = 0.693359375  # 355/512: n * _LN2_HI32 is exact for |n| < 2**15 ...
_LN2_LO32 = math.log(2.0) - 0.693359375  # ... and the rest, rounded to float32 where used
# exp(x) is 0 in float32 below -103.98 and inf above 88.73; exp2 below -150 and above 128
_CLAMP32 = (-104.0, 89.0)
_CLAMP2_32 = (-151.0, 129.0)
# The op table's `fast` forms (ir/ops.py) call these for float32 results; their rows'
# `fast_ulps` are the bounds tests/jit/test_vector_paths.py holds them to.

# Fast mode's erf (_ferf32), in float32 throughout so that LLVM packs 16 lanes, both ranges
# computed and one selected; a = |x| clamped to 4 (float32 erf is 1 from 3.9192 on), s = a*a
# rounded, the result given x's sign:
#     a < 15/16:  erf = a + a R(s),             R ~ erf(a)/a - 1, degree 6 in s
#     otherwise:  erf = 1 - e**-a**2 Q(a - mid), Q ~ erfcx = erfc e**a**2, degree 9
# e**-a**2 = 2**n p(r): n = rint(-s / ln2), r = -s - n ln2 - (a*a - s), the fma remainder
# a*a - s making r exact to float32's precision although s is rounded; p(r) = 1 + r +
# r**2 E(r), E of degree 4 (|r| <= ln2/2, so 2**n p(r) is normal: n >= -23). The last steps
# are single roundings (fma(a, R, a), fma(-2**n p, Q, 1)), and R and the e**-a**2 Q term are
# small beside the result, so their own errors shrink in it. R, Q and E are weighted minimax
# fits, rounded to float32 one coefficient at a time (bench/erf_fit32.py derives them):
# every float32 in [-4.5, 4.5] is within 0.94 ulp of the true erf (bench/erf_fit.py check32).
_ERF32_SPLIT, _ERF32_CLAMP, _ERF32_MID = 0.9375, 4.0, 2.46875
_ERF32_R = (0.12837917, -0.3761263, 0.11283626, -0.026855737, 0.005192438, -0.0008050384,
            8.000272e-05)
_ERF32_Q = (0.21315426, -0.07593256, 0.025692044, -0.008312793, 0.0026572903,
            -0.00066922745, 0.00023246626, -0.00016430601, -7.356083e-05, -3.262805e-05)
_EXP32_E = (0.49999994, 0.16666521, 0.041668292, 0.008368719, 0.0013818726)


@lru_cache(maxsize=None)
def fast_numba_math() -> dict:
    """Fast mode's float32 `exp`, `exp2` (njit, inlined into fast kernels) and `erf`
    (_fast_erf below).

    The same scheme as the float64 functions above, in float32 so that LLVM packs 16
    lanes instead of 8, with a degree-7 polynomial instead of degree 13:

        n = rint(x / ln2);  r = x - n ln2 (ln2 in two parts);  exp(x) = 2**n * p(r)

    2**n is applied as two factors 2**(n - n//2) and 2**(n//2), each a normal float32, so
    results in the subnormal range round once and n = 128 gives inf. Within 2 ulp of the
    true value on the float32 range (measured about 1 ulp); not the exact path's
    correctly rounded result, which is why only fast mode uses them. Fast mode assumes no
    NaN or infinity reaches its arithmetic (fast-math), so these do not test for NaN."""
    import numba

    from tilepy.precision.bits import bits_f32, f32_bits

    fma32, rint32 = _fma_rint(32)

    F = np.float32
    c2, c3, c4, c5, c6, c7 = (F(c) for c in _C32)
    d1, d2, d3, d4, d5, d6, d7 = (F(c) for c in _C2_32)
    inv_ln2, ln2_hi, ln2_lo = F(1.0 / math.log(2.0)), F(_LN2_HI32), F(_LN2_LO32)
    lo, hi = F(_CLAMP32[0]), F(_CLAMP32[1])
    lo2, hi2 = F(_CLAMP2_32[0]), F(_CLAMP2_32[1])
    one = F(1.0)
    I23, BIAS = np.int32(23), np.int32(127)

    @numba.njit(inline="always")
    def scale(y, n):
        """y * 2**n for y in [0.7, 1.5) and integer-valued float32 n in [-151, 129]: n - n//2
        added to y's exponent field (stays normal), then one multiply by 2**(n//2), which
        rounds a subnormal result once and overflows to inf. (Two float multiplies would
        not do: fast-math reassociates them into one by 2**n, which is inf for n = 128.)"""
        k = np.int32(n)
        h = k >> np.int32(1)
        y1 = bits_f32(np.uint32(f32_bits(y) + np.uint32((k - h) << I23)))
        return y1 * bits_f32(np.uint32((h + BIAS) << I23))

    @numba.njit(inline="always")
    def fexp32(x):
        xc = min(max(np.float32(x), lo), hi)
        n = rint32(xc * inv_ln2)
        r = fma32(-n, ln2_lo, fma32(-n, ln2_hi, xc))
        p = fma32(fma32(fma32(fma32(fma32(c7, r, c6), r, c5), r, c4), r, c3), r, c2)
        return scale(fma32(p * r, r, r) + one, n)

    @numba.njit(inline="always")
    def fexp2_32(x):
        xc = min(max(np.float32(x), lo2), hi2)
        n = rint32(xc)
        r = xc - n  # exact: |r| <= 1/2
        p = fma32(fma32(fma32(fma32(fma32(fma32(d7, r, d6), r, d5), r, d4), r, d3), r, d2),
                  r, d1)
        return scale(fma32(p, r, one), n)

    return {"_fexp32": fexp32, "_fexp2_32": fexp2_32, "_ferf32": _fast_erf()}


def _fast_erf():
    """Fast mode's erf for float32 x (njit, inlined; the scheme is at _ERF32_R above)."""
    import numba

    from tilepy.precision.bits import bits_f32, f32_bits

    fma, rint = _fma_rint(32)
    F = np.float32
    poly_r, poly_q, poly_e = (_horner(fma, tuple(F(c) for c in cs))
                              for cs in (_ERF32_R, _ERF32_Q, _EXP32_E))
    split, clamp, mid, one = F(_ERF32_SPLIT), F(_ERF32_CLAMP), F(_ERF32_MID), F(1.0)
    neg_inv_ln2, ln2_hi, ln2_lo = F(-1.0 / math.log(2.0)), F(_LN2_HI32), F(_LN2_LO32)
    abs32, sign32, I23 = np.uint32(0x7FFFFFFF), np.uint32(0x80000000), np.int32(23)

    @numba.njit(inline="always")
    def ferf32(x):
        xf = np.float32(x)
        a = min(bits_f32(f32_bits(xf) & abs32), clamp)
        s = a * a
        small = fma(a, poly_r(s), a)
        n = rint(s * neg_inv_ln2)  # in [-23, 0]: n * ln2_hi is exact
        r = fma(-n, ln2_lo, fma(-n, ln2_hi, -s) - fma(a, a, -s))  # -a*a - n ln2
        p = fma(r * r, poly_e(r), r) + one
        e = bits_f32(np.uint32(f32_bits(p) + np.uint32(np.int32(n) << I23)))  # 2**n p
        large = fma(-e, poly_q(a - mid), one)
        y = small if a < split else large
        return bits_f32(f32_bits(y) | (f32_bits(xf) & sign32))  # x's sign (erf(-0) is -0)

    return ferf32


def fast_py_math() -> dict:
    """The same helpers for the py tier: numpy's float32 exp and exp2, libm's erf rounded
    to float32."""
    return {"_fexp32": lambda x: np.exp(np.float32(x)),
            "_fexp2_32": lambda x: np.exp2(np.float32(x)),
            "_ferf32": lambda x: np.float32(math.erf(np.float64(x)))}
