"""Rounding arrays to a number format in numpy (`cast`, `round_to`, `decode`, ...): the
interpreter's reference for every store and every narrow-float operation.

Bits are ml_dtypes', except that float64 inputs round once and float8_e8m0fnu follows
tilepy's own rule (docs/precision.md). Vectorised numpy; large float32 casts go through
fastcast.py (Numba) when Numba runs or has paid for its start (see _use_numba).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from tilepy.precision.codespec import CodeSpec, code_spec
from tilepy.precision.formats import Format, get_format

_E8M0 = "float8_e8m0fnu"
# float32 / float64 layouts: (unsigned view, mantissa bits)
_SRC = {np.dtype(np.float32): (np.uint32, 23), np.dtype(np.float64): (np.uint64, 52)}
# float32 arrays of at least _FAST_MIN elements cast to these formats go through the
# parallel Numba encoders of fastcast.py (same bits; numpy's float16 cast is as fast) once
# Numba runs in the process. Starting it (~0.45 s of CPU) costs as much as ml_dtypes
# casting 2^25-2^27 float32 elements (3-12 ns each by format and data), so a process that
# has not started it casts 2^26 elements through ml_dtypes first.
_FAST_MIN = 1 << 16
_START_BUDGET = 1 << 26
_FAST_FORMATS = frozenset([
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    _E8M0, "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
_slow_elements = 0  # elements of large float32 casts done by ml_dtypes so far


def _use_numba(n: int) -> bool:
    """Whether a float32 cast of n elements goes through fastcast.py (see _START_BUDGET).
    Only from the main thread: Numba's workqueue threading layer (where no OpenMP or TBB
    is installed) aborts the process when two threads run parallel kernels at once."""
    global _slow_elements
    if n < _FAST_MIN or threading.current_thread() is not threading.main_thread():
        return False
    if "numba" in sys.modules or _slow_elements >= _START_BUDGET:
        return True
    _slow_elements += n
    return False


def cast(x, fmt, saturate: bool = False) -> np.ndarray:
    """Round `x` (any float, int or bool array or scalar) to `fmt`; return an array of
    fmt's numpy/ml_dtypes dtype.

    Floats: round-to-nearest-even; overflow and infinities follow ml_dtypes (e4m3fn ->
    NaN, e5m2/bf16/fp16 -> inf, fnuz -> NaN 0x80, fp6/fp4 -> clamp to max) unless
    `saturate=True`, which clamps finite overflow and +-inf to +-max finite (NaN stays
    NaN). float64 inputs are rounded once (ml_dtypes rounds twice, via float32); a float64
    NaN gives the code ml_dtypes gives for float32(x). float8_e8m0fnu rounds to the nearest
    power of two, ties away from zero, for every input dtype (see `_e8m0_from64`).
    Integers: a float input is truncated toward zero and clamped to the range, NaN -> 0
    (PTX cvt.rzi.sat; ml_dtypes would wrap); an int input wraps like numpy `astype`
    unless `saturate=True` clamps it.
    Large float32 arrays are encoded in parallel by Numba (fastcast.py), same bits.
    """
    f = get_format(fmt)
    x = np.asarray(x)
    if f.is_bool:
        return x.astype(np.bool_)
    if f.is_int:
        return _cast_int(x, f, saturate)
    x = _as_float(x)
    if x.dtype == np.float32 and f.name in _FAST_FORMATS and _use_numba(x.size):
        from tilepy.precision.fastcast import encode_f32  # imports numba

        return encode_f32(x, f, saturate).view(f.np_dtype)
    if saturate:
        x = np.clip(x, -f.max_finite, f.max_finite) if f.has_sign else _clip_top(x, f)
    if f.name == _E8M0:  # float32 and float16 widen exactly (signalling NaNs set "invalid")
        with np.errstate(invalid="ignore"):
            return _e8m0_from64(x.astype(np.float64)).view(f.np_dtype)
    if x.dtype == np.float32 or f.bits >= 32 or f.name == "float16":
        with np.errstate(all="ignore"):  # single rounding already (numpy / ml_dtypes)
            out = x.astype(f.np_dtype)
            if f.name == "float16" and x.dtype == np.float64:
                nan = np.isnan(x)  # NaN payloads: as for float32(x), like the other formats
                if nan.any():
                    out[nan] = x[nan].astype(np.float32).astype(np.float16)
            return out
    with np.errstate(all="ignore"):
        y = _round_float(x, code_spec(f)).astype(np.float32)  # exact: on fmt's grid
        nan = np.isnan(x)
        if nan.any():  # NaN payloads: as ml_dtypes does for float32(x)
            y[nan] = x[nan].astype(np.float32)
        return y.astype(f.np_dtype)


def round_to(x, fmt) -> np.ndarray:
    """`x` rounded to `fmt` and widened to the compute dtype: float32 for floats narrower
    than 32 bits, float64 for float64, the int dtype for ints. Bit-identical to
    `cast(x, fmt).astype(compute dtype)`, faster for float32 input."""
    f = get_format(fmt)
    x = np.asarray(x)
    if f.name == "bfloat16" and x.dtype == np.float32:  # hot path (sNaN sets "invalid")
        with np.errstate(invalid="ignore"):
            return x.astype(f.np_dtype).astype(np.float32)
    if not f.is_narrow_float:
        return cast(x, f)
    x = _as_float(x)
    if x.dtype != np.float32 or f.name in (_E8M0, "bfloat16"):  # ml_dtypes is fastest
        return cast(x, f).astype(np.float32)
    with np.errstate(all="ignore"):  # NaN lanes are replaced below
        return _round_to_f32(x, f)


def _round_to_f32(x: np.ndarray, f: Format) -> np.ndarray:
    y = _round_float(x, code_spec(f))
    if f.nan == "neg_zero":
        y[y == 0] = 0.0  # fnuz zero has no sign
    over = np.abs(y) > np.float32(f.max_finite)
    if over.any():
        y[over] = _overflow_value(f, np.signbit(y[over]))
    nan = np.isnan(x)
    if nan.any():
        y[nan] = x[nan].astype(f.np_dtype).astype(np.float32)
    return y


def random_bits(seed: int, shape) -> np.ndarray:
    """The explicit seeded stream for stochastic rounding: uint32 words from Philox(seed)."""
    gen = np.random.Generator(np.random.Philox(seed))
    return gen.integers(0, 1 << 32, size=shape, dtype=np.uint32)


def stochastic_round(x, fmt, rbits, saturate: bool = False) -> np.ndarray:
    """Round float32/float64 `x` to `fmt` stochastically; return fmt's dtype.

    With ulp the spacing of fmt at |x| and f = the fraction of an ulp by which |x|
    exceeds the grid value below it, |x| rounds away from zero iff f * 2^32 > r, where r
    is the matching uint32 of `rbits` (see `random_bits`): P(up) = ceil(f * 2^32) / 2^32.
    Grid values are kept exactly; overflow, NaN and saturation then follow `cast`."""
    f = get_format(fmt)
    x = _as_float(np.asarray(x))
    spec = code_spec(f)
    with np.errstate(all="ignore"):
        ax = np.abs(x.astype(np.float64))
        e = np.frexp(ax)[1].astype(np.int64) - 1
        ulp = np.ldexp(1.0, (np.maximum(e, spec.emin) - spec.man_bits).astype(np.int32))
        q = ax / ulp
        down = np.floor(q)
        up = (q - down) * 4294967296.0 > np.asarray(rbits, dtype=np.uint32)
        y = np.copysign((down + up) * ulp, x).astype(x.dtype)  # exact, or overflow
    return cast(np.where(np.isfinite(x), y, x), f, saturate)


def decode(codes, fmt) -> np.ndarray:
    """float32 values of storage codes (uint8/uint16 arrays) of a narrow float format."""
    f = get_format(fmt)
    return np.asarray(codes).astype(f.storage).view(f.np_dtype).astype(np.float32)


def encode(x, fmt, saturate: bool = False) -> np.ndarray:
    """Storage codes (uint8/uint16) of `cast(x, fmt, saturate)`."""
    f = get_format(fmt)
    return cast(x, f, saturate).view(f.storage)


def compute_dtype(fmt) -> np.dtype:
    """The dtype arithmetic on `fmt` runs in (float32 for narrow floats)."""
    return get_format(fmt).compute_dtype


def _as_float(x: np.ndarray) -> np.ndarray:
    if x.dtype in _SRC:
        return x
    if x.dtype.kind in "biu":
        return x.astype(np.float64)
    return x.astype(np.float32)  # float16, bfloat16, fp8, ...: widening is exact


def _clip_top(x: np.ndarray, f: Format) -> np.ndarray:
    return np.where(x > f.max_finite, x.dtype.type(f.max_finite), x)


def _round_float(x: np.ndarray, spec: CodeSpec) -> np.ndarray:
    """RNE of float32/float64 `x` to `spec.man_bits` mantissa bits, exponents >= emin
    (subnormal spacing below), no overflow handling. Same dtype out."""
    ut, sman = _SRC[x.dtype]
    drop = sman - spec.man_bits
    b = x.view(ut)
    one = ut(1)
    lsb = (b >> ut(drop)) & one
    r = (b + ut((1 << (drop - 1)) - 1) + lsb) & ~ut((1 << drop) - 1)
    y = r.view(x.dtype)
    magic = x.dtype.type(2.0 ** (spec.emin - spec.man_bits + sman))
    ax = np.abs(x)
    small = ax < x.dtype.type(2.0**spec.emin)
    count = np.count_nonzero(small)
    # the add rounds to the subnormal spacing ulp(magic), RNE
    if count > x.size // 8:
        return np.where(small, np.copysign((ax + magic) - magic, x), y)
    if count:
        y[small] = np.copysign((ax[small] + magic) - magic, x[small])
    return y


def _overflow_value(f: Format, negative: np.ndarray) -> np.ndarray:
    if f.has_inf:
        v = np.float32(np.inf)
    elif f.nan == "none":
        v = np.float32(f.max_finite)
    else:
        v = np.float32(np.nan)
    out = np.where(negative, -v, v).astype(np.float32)
    if f.nan == "neg_zero":
        out[:] = np.float32(f.np_dtype.type(np.nan))
    return out


def _e8m0_from64(x: np.ndarray) -> np.ndarray:
    """float64 -> float8_e8m0fnu codes: the nearest power of two 2^p, ties away from zero
    (a significand >= 1.5 rounds up), so the code is p + 127; positive values below 2^-127
    give 2^-127 (code 0); zero, negatives, NaN, inf and overflow (>= 1.5 * 2^127) give NaN
    (0xff). Float64 subnormals lie far below 2^-127 and give code 0."""
    b = x.view(np.uint64)
    e = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64) - 1023
    up = ((b & np.uint64((1 << 52) - 1)) >= np.uint64(1 << 51)).astype(np.int64)
    code = np.maximum(e + 127 + up, 0)
    bad = ~(x > 0) | (code > 254)
    return np.where(bad, 255, code).astype(np.uint8)


def _cast_int(x: np.ndarray, f: Format, saturate: bool) -> np.ndarray:
    lo, hi = int(f.min_value), int(f.max_finite)
    if x.dtype.kind not in "biu":  # numpy and ml_dtypes floats
        with np.errstate(invalid="ignore"):  # widening quiets signalling NaNs
            v = np.trunc(_as_float(x).astype(np.float64))
        v = np.nan_to_num(np.clip(v, lo, hi), nan=0.0)
        return v.astype(np.int64).astype(f.np_dtype)
    if saturate:
        return np.clip(x.astype(np.int64), lo, hi).astype(f.np_dtype)
    return x.astype(f.np_dtype)
