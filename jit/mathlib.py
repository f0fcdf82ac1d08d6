"""Vectorisable float64 math for the numba tier: `exp` for results stored as float32 or narrower.

The numerics contract computes transcendentals in float64 and rounds once to the result
dtype; the two backends "may differ in the last bit only in rare ties". libm's `exp` is
a call per element, which LLVM cannot vectorise, and it dominated the JIT's softmax. This
module owns a branch-free float64 `exp` that LLVM vectorises (8 lanes with AVX-512):

    n = nearest integer to x / ln2        (the 1.5 * 2**52 shift trick: the low bits of t hold n)
    r = x - n * ln2                       (two fused steps with ln2 split in hi + lo)
    exp(r) = 1 + r + r**2 * q(r)          (|r| <= ln2 / 2; q: Taylor terms 1/2! .. 1/13!, Estrin)
    exp(x) = 2**n * exp(r)                (n added to the exponent field)

Its error against the true exp is below 1.04 ulp of float64 (the test measures it against
long double), so a result rounded to float32 equals the correctly rounded one unless the
true value lies within about 2**-52 (relative) of a float32 rounding boundary: the "rare
ties" of the contract, roughly 1 in 10**8 random inputs. For a float64 result the JIT keeps
libm, whose float64 results agree with numpy's except in rare ties; this `exp` would not.

The argument is clamped to [-200, 200] before the reduction, so the scaling never leaves
the normal range. That is exact for its purpose: exp(-200) ~ 1.4e-87 and exp(200) ~ 7e86
round to 0 and inf in float32 as every x beyond them does. NaN passes through unchanged.

The multiply-adds use `llvm.fma` (exactly rounded, the same bits on every machine, in
software where the CPU lacks FMA): this is the implementation of one float64 function, as
libm's own exp uses FMA, not a contraction of the kernel's arithmetic, which stays
FMA-free. The py tier uses numpy's exp for the same op.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Taylor coefficients 1/k!, k = 2..13: |r| <= 0.3466 leaves r**14 / 14! < 5e-18.
_C = [1.0 / math.factorial(k) for k in range(2, 14)]
_INV_LN2 = 1.4426950408889634  # 1 / ln 2, rounded to float64
_LN2_HI = 0.6931471805599453  # ln 2 rounded to float64 ...
_LN2_LO = 2.3190468138462996e-17  # ... and the rest: ln 2 - _LN2_HI, to float64
_SHIFT = 6755399441055744.0  # 1.5 * 2**52: x + _SHIFT rounds x to an integer in its low bits
_CLAMP = 200.0


@lru_cache(maxsize=None)
def numba_math() -> dict:
    """The njit helpers by name, for the numba tier's namespace (imports numba)."""
    import numba
    from llvmlite import ir as llvm_ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from tilepy.precision.codecs64 import bits_f64, f64_bits

    @intrinsic
    def fma(typingctx, a, b, c):
        """a * b + c rounded once (llvm.fma.f64)."""
        sig = types.float64(types.float64, types.float64, types.float64)

        def codegen(context, builder, signature, args):
            d = llvm_ir.DoubleType()
            fn = cgutils.get_or_insert_function(
                builder.module, llvm_ir.FunctionType(d, [d, d, d]), "llvm.fma.f64")
            return builder.call(fn, args)

        return sig, codegen

    c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = _C
    U52 = np.uint64(52)

    @numba.njit(inline="always")
    def exp_to32(x):
        xc = min(max(x, -_CLAMP), _CLAMP)
        t = fma(xc, _INV_LN2, _SHIFT)
        n = t - _SHIFT
        r = fma(-n, _LN2_LO, fma(-n, _LN2_HI, xc))
        r2 = r * r
        r4 = r2 * r2
        hi = fma(fma(c13, r, c12), r2, fma(c11, r, c10))
        mid = fma(fma(c9, r, c8), r2, fma(c7, r, c6))
        lo = fma(fma(c5, r, c4), r2, fma(c3, r, c2))
        q = fma(fma(hi, r4, mid), r4, lo)
        y = 1.0 + fma(r2, q, r)
        # 2**n: n sits in t's low mantissa bits (two's complement); only its low 12 bits
        # reach the exponent field, which is all |n| <= 289 needs
        y = bits_f64(f64_bits(y) + (f64_bits(t) << U52))
        return x if x != x else y

    return {"_exp_to32": exp_to32}


def py_math() -> dict:
    """The same helpers for the py tier (no Numba): numpy's float64 exp."""
    return {"_exp_to32": lambda x: np.float64(np.exp(np.float64(x)))}
