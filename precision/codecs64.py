"""Numba float64 -> narrow-format encoders with ONE rounding (`encoder64`, what `cast` does
for float64) and the float64 bit intrinsics; imports numba. A value is rounded to the
format's grid in float64, then encoded, now exact, by codecs.py's float32 encoder, which
keeps the overflow, NaN and saturation rules (float8_e8m0fnu has its own rule here).
"""

from __future__ import annotations

from functools import lru_cache

import numba
import numpy as np

from tilepy.precision.bits import bits_f64, f64_bits  # noqa: F401  (re-exported)
from tilepy.precision.codecs import _encoder
from tilepy.precision.codespec import code_spec
from tilepy.precision.formats import get_format


def encoder64(fmt, saturate: bool = False):
    """The njit encoder float64 -> storage code of a narrow float format, rounding once
    (RNE); bits equal `tilepy.precision.encode(x_float64, fmt, saturate)`."""
    return _encoder64(get_format(fmt).name, bool(saturate))


@lru_cache(maxsize=None)
def _encoder64(name: str, saturate: bool):
    if name == "float8_e8m0fnu":
        return _make_e8m0_encoder64(saturate)
    s = code_spec(name)
    U = np.uint64
    drop = U(52 - s.man_bits)
    half_m1 = U((1 << (52 - s.man_bits - 1)) - 1)
    low = ~U((1 << (52 - s.man_bits)) - 1)
    magic = 2.0 ** (s.emin - s.man_bits + 52)
    min_normal = 2.0**s.emin
    top = get_format(name).max_finite
    enc32 = _encoder(name, saturate)

    @numba.njit(inline="always")
    def encode(x):
        v = np.float64(x)
        if saturate:
            if v > top:
                v = top
            elif v < -top:
                v = -top
        a = abs(v)
        if a < min_normal:  # the add rounds to the subnormal spacing, ties to even
            r = np.float64(np.copysign((a + magic) - magic, v))
        else:
            b = f64_bits(v)
            r = bits_f64(U(U(b + half_m1) + U((b >> drop) & U(1))) & low)
        if v != v:
            r = v
        return enc32(np.float32(r))  # exact: r is on the grid (or overflows, or NaN)

    return encode


def _make_e8m0_encoder64(saturate: bool):
    """float8_e8m0fnu from float64: the nearest power of two, ties away from zero (the rule
    of rounding._e8m0_from64)."""
    over = 0xFE if saturate else 0xFF

    @numba.njit(inline="always")
    def encode(x):
        v = np.float64(x)
        if not v > 0:
            return np.uint8(0xFF)
        b = f64_bits(v)
        e = np.int64((b >> np.uint64(52)) & np.uint64(0x7FF)) - 1023
        mant = b & np.uint64((1 << 52) - 1)
        code = max(e + 127 + (1 if mant >= np.uint64(1 << 51) else 0), 0)
        return np.uint8(over if code > 254 else code)

    return encode
