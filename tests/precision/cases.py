"""Test inputs for the precision tests: edge cases per format and random bit patterns."""

import numpy as np

from tilepy.precision import get_format

FLOAT_NARROW = [
    "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
]


def random_f32(n: int, seed: int) -> np.ndarray:
    """n float32 values with uniformly random bit patterns (NaNs with payloads included)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def code_values(fmt) -> np.ndarray:
    """float32 values of every code of fmt (from ml_dtypes)."""
    f = get_format(fmt)
    codes = np.arange(1 << (8 * f.itemsize), dtype=np.uint64).astype(f.storage)
    if f.bits < 8:
        codes = codes[: 1 << f.bits]
    return codes.view(f.np_dtype).astype(np.float32)


def finite_magnitudes(fmt) -> np.ndarray:
    """Sorted distinct finite |values| of fmt's codes, as float64."""
    v = code_values(fmt)
    return np.unique(np.abs(v[np.isfinite(v)]).astype(np.float64))


def edge_f32(fmt) -> np.ndarray:
    """Every code value, the midpoints between neighbours (ties), one float32 ulp either
    side of each, +-0, +-inf, NaNs with payloads, float32 extremes and subnormals."""
    v = finite_magnitudes(fmt)
    mids = (v[1:] + v[:-1]) / 2
    top = v[-1]
    beyond = [top * 1.0625, top * 1.125, top * 1.5, top * 2, 3.4e38]
    with np.errstate(over="ignore"):
        base = np.concatenate([v, mids, beyond]).astype(np.float32)
    base = np.concatenate([base, -base])
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)),
                           np.nextafter(base, np.float32(-np.inf))])
    specials = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                         0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0x00000001,
                         0x80000001, 0x007FFFFF, 0x00400000, 0x00400001, 0x00800000,
                         0x7F7FFFFF, 0xFF7FFFFF], dtype=np.uint32).view(np.float32)
    return np.concatenate([near, specials]).astype(np.float32)


def ml_cast(x: np.ndarray, fmt) -> np.ndarray:
    """The storage codes tilepy's contract gives float32 `x`: ml_dtypes' (numpy's for
    float16) for every format but float8_e8m0fnu, whose rule is tilepy's own (ml_dtypes
    changed it between versions): `e8m0_codes`."""
    f = get_format(fmt)
    if f.name == "float8_e8m0fnu":
        return e8m0_codes(x)
    with np.errstate(all="ignore"):
        return x.astype(f.np_dtype).view(f.storage)


def e8m0_codes(x: np.ndarray) -> np.ndarray:
    """float8_e8m0fnu codes by the contract, from frexp rather than bit fields: with
    x = s * 2^p, 1 <= s < 2, the code is p + 127, plus one when s >= 1.5; positive values
    below 2^-127 give code 0; zero, negatives, NaN, inf and overflow give 0xff."""
    with np.errstate(invalid="ignore"):  # widening quiets signalling NaNs
        x = np.asarray(x, dtype=np.float64)
        pos = (x > 0) & np.isfinite(x)
    m, e = np.frexp(np.where(pos, x, 1.0))  # x = m * 2^e, 0.5 <= m < 1
    code = np.maximum(e.astype(np.int64) - 1 + (m >= 0.75) + 127, 0)
    return np.where(pos & (code <= 254), code, 255).astype(np.uint8)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype.itemsize == b.dtype.itemsize
    u = np.dtype(f"uint{8 * a.dtype.itemsize}")
    return np.array_equal(a.view(u), b.view(u))

