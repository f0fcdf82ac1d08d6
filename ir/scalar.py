"""The functions the op table's scalar forms call (`_floordiv({0}, {1})`, `_log({0})`...).

Each helper is plain Python in Numba's subset and computes what its row's numpy form
computes, for one element: the JIT's numba tier compiles it with njit, and its py tier calls
it as it is (it raises no Python exception; it gives inf and NaN as IEEE does). `_py_*` are
py-tier stand-ins for `math` functions. Rows in ir/ops.py name these; nothing decides here.
"""

from __future__ import annotations

import math

import numpy as np

# numpy (the interpreter) gives x86's default NaN, sign bit set, for invalid operations
_NAN = -math.nan


def _nbits(a):
    """Bit width of an integer scalar's type (Numba: a typed constant, jit/runtime.py)."""
    return np.asarray(a).dtype.itemsize * 8


def _max(a, b):
    return a if (a >= b or a != a) else b


def _min(a, b):
    return a if (a <= b or a != a) else b


def _floordiv(a, b):
    if b == 0:
        return a - a
    if b == -1:  # avoids the INT_MIN // -1 trap; wraps as numpy does
        return (a - a) - a
    return a // b


def _mod(a, b):
    if b == 0 or b == -1:
        return a - a
    return a % b


def _shl(a, s):
    if s < 0 or s >= _nbits(a):
        return a - a
    return a << s


def _shr(a, s):
    if s < 0 or s >= _nbits(a):
        return ~(a - a) if a < 0 else a - a
    return a >> s


def _log(x):
    if x != x:
        return np.float64(x)
    if x < 0:
        return np.float64(_NAN)
    if x == 0:
        return np.float64(-math.inf)
    return np.float64(math.log(x))


def _log2(x):
    if x != x:
        return np.float64(x)
    if x < 0:
        return np.float64(_NAN)
    if x == 0:
        return np.float64(-math.inf)
    return np.float64(math.log2(x))


def _sqrt(x):
    if x != x:
        return np.float64(x)
    if x < 0:
        return np.float64(_NAN)
    return np.float64(math.sqrt(x))


def _softplus(x):
    """log(1 + e ** x) in float64 as the row's numpy form computes it: x + log1p(e ** -x)
    for x > 0, else log1p(e ** x); e ** -|x| <= 1 never overflows."""
    if x != x:
        return np.float64(x)
    t = math.log1p(math.exp(-abs(x)))
    return np.float64(x + t) if x > 0 else np.float64(t)


def _py_erf(x):
    """`math.erf` for the py tier (the numba tier has Numba's)."""
    from scipy.special import erf

    return np.float64(erf(np.float64(x)))


def _fp4_twiddled(h, j):
    """The fp4 (e2m1) value number j % 4 of the twiddled 16-bit half-word h, as float32:
    sign, exponent (2 bits) and mantissa at bits (15; 8, 7; 6), (12; 5, 4; 3), (9; 2, 1; 0),
    (14; 11, 10; 13) for j % 4 = 0..3. Exponent 0 gives 0.5 * mantissa (signed zero)."""
    k = j & 3
    if k == 0:
        s, e, m = h >> 15, h >> 7, h >> 6
    elif k == 1:
        s, e, m = h >> 12, h >> 4, h >> 3
    elif k == 2:
        s, e, m = h >> 9, h >> 1, h
    else:
        s, e, m = h >> 14, h >> 10, h >> 13
    e, m = e & 3, m & 1
    mag = 0.5 * m if e == 0 else (1.0 + 0.5 * m) * (1 << (e - 1))
    return np.float32(-mag if s & 1 else mag)
