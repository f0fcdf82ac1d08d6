"""cast / round_to against ml_dtypes (float32 in) and an independent nearest-value search
(float64 in, single rounding)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.precision.cases import (
    FLOAT_NARROW,
    edge_f32,
    finite_magnitudes,
    ml_cast,
    random_f32,
    same_bits,
)
from tilepy.precision import UnknownFormatError, cast, get_format, round_to

RANDOM = random_f32(1 << 20, seed=1)


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
def test_float32_cast_and_round_to_match_ml_dtypes(fmt):
    f = get_format(fmt)
    x = np.concatenate([edge_f32(fmt), RANDOM])
    want = ml_cast(x, fmt)
    got = cast(x, fmt)
    assert got.dtype == f.np_dtype
    assert same_bits(got, want)
    r = round_to(x, fmt)
    assert r.dtype == np.float32
    assert same_bits(r, want.view(f.np_dtype).astype(np.float32))


def _nearest(x: np.ndarray, fmt) -> np.ndarray:
    """Single RNE rounding of float64 x by searching the sorted code values (not bit
    tricks): codes as ml_dtypes stores the chosen value; beyond the top, overflow."""
    vals = finite_magnitudes(fmt)
    ext = np.append(vals, 2 * vals[-1] - vals[-2])  # the first value past the top
    ax = np.abs(x)
    i = np.clip(np.searchsorted(ext, ax, side="right") - 1, 0, len(ext) - 2)
    lo, hi = ext[i], ext[i + 1]
    pick_hi = (hi - ax < ax - lo) | ((hi - ax == ax - lo) & (i % 2 == 1))
    j = np.where(ax >= ext[-1], len(ext) - 1, np.where(pick_hi, i + 1, i))
    mag = np.where(j == len(ext) - 1, np.inf, ext[np.minimum(j, len(vals) - 1)])
    return ml_cast(np.copysign(mag, x).astype(np.float32), fmt)


def _float64_cases(fmt, seed):
    v = finite_magnitudes(fmt)
    mids = np.concatenate([(v[1:] + v[:-1]) / 2, [1.5 * v[-1] - 0.5 * v[-2]]])
    rng = np.random.default_rng(seed)
    tiny = 2.0 ** -rng.integers(30, 52, mids.size)
    near = np.concatenate([mids, mids * (1 + tiny), mids * (1 - tiny), v * (1 + tiny)])
    spread = np.ldexp(rng.random(50_000) + 1, rng.integers(-140, 130, 50_000))
    x = np.concatenate([near, spread])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", [f for f in FLOAT_NARROW if f != "float8_e8m0fnu"])
def test_float64_rounds_once(fmt):
    x = _float64_cases(fmt, seed=2)
    assert same_bits(cast(x, fmt), _nearest(x, fmt))
    assert same_bits(round_to(x, fmt), cast(x, fmt).astype(np.float32))


@given(st.lists(st.floats(allow_nan=False, width=64), min_size=1, max_size=64),
       st.sampled_from(["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn",
                        "float16", "float8_e4m3fnuz", "float6_e3m2fn"]),
       st.booleans())
def test_float64_rounds_once_hypothesis(values, fmt, saturate):
    x = np.array(values, dtype=np.float64)
    want = _nearest(x, fmt)
    if saturate:
        f = get_format(fmt)
        want = _nearest(np.clip(x, -f.max_finite, f.max_finite), fmt)
    assert same_bits(cast(x, fmt, saturate=saturate), want)


def test_e8m0_rounds_to_nearest_power_of_two_ties_away():
    x = np.array([1.5, 1.5 - 2**-40, 3.0, 0.75, 2.0**-127, 2.0**-127 * 1.01, 0.0, -2.0,
                  2.0**-127 * 1.5, 2.0**-127 * 1.5 - 2**-160, 2.0**-140, 1e-300, 2.0**127,
                  2.0**127 * 1.5, 2.0**127 * 1.5 - 2.0**80, np.inf, np.nan])
    want = [128, 127, 129, 127, 0, 0, 255, 255, 1, 0, 0, 0, 254, 255, 254, 255, 255]
    assert list(cast(x, "float8_e8m0fnu").view(np.uint8)) == want
    x32 = x.astype(np.float32)
    exact = x32.astype(np.float64) == x  # the float32 inputs that equal x
    got32 = cast(x32, "float8_e8m0fnu").view(np.uint8)
    assert list(got32[exact]) == list(np.array(want)[exact])
    sat = cast(np.array([np.inf, 2.0**128, 1.0]), "float8_e8m0fnu", saturate=True)
    assert list(sat.view(np.uint8)) == [254, 254, 127]


@pytest.mark.skipif(tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) < (0, 7),
                    reason="ml_dtypes < 0.7 rounds float32 subnormals to e8m0 by another "
                    "rule; tilepy keeps its own rule (test above)")
def test_e8m0_rule_is_ml_dtypes_07_rule():
    """The contract's e8m0 rule is the one ml_dtypes adopted in 0.7: agree on every code
    value, tie, float32 subnormal and a million random float32 inputs."""
    x = np.concatenate([edge_f32("float8_e8m0fnu"), RANDOM,
                        np.arange(1, 0x800000, 97, dtype=np.uint32).view(np.float32)])
    with np.errstate(all="ignore"):
        theirs = x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    assert same_bits(cast(x, "float8_e8m0fnu"), theirs)


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
def test_float64_of_float32_values_agrees_with_float32_path(fmt):
    x = np.concatenate([edge_f32(fmt), RANDOM[:200_000]])
    x = x[~np.isnan(x)]  # widening quiets signalling NaNs, so NaN codes may differ
    assert same_bits(cast(x.astype(np.float64), fmt), ml_cast(x, fmt))


@pytest.mark.parametrize(
    "value, fmt, once",
    [
        (1 + 2**-8 + 2**-40, "bfloat16", 0x3F81),  # float32(value) is the tie 1 + 2^-8
        (1 + 2**-4 + 2**-30, "float8_e4m3fn", 0x39),
        (1 + 2**-3 + 2**-30, "float8_e5m2", 0x3D),
        (1.25 + 2**-30, "float4_e2m1fn", 0x3),
    ],
)
def test_float64_just_above_a_float32_tie_rounds_once(value, fmt, once):
    """Rounding via float32 would land on the tie and round to even (one code lower);
    cast rounds the float64 once. (ml_dtypes rounded twice before 0.7.)"""
    x = np.array([value])
    assert int(cast(x, fmt).view(get_format(fmt).storage)[0]) == once
    assert int(cast(x.astype(np.float32), fmt).view(get_format(fmt).storage)[0]) == once - 1


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
def test_saturate_clamps_overflow_and_inf_keeps_nan(fmt):
    f = get_format(fmt)
    with np.errstate(over="ignore"):  # bf16's 4 * max is inf in float32
        big = np.array([f.max_finite * 4, np.inf, f.max_finite * 2, np.nan], dtype=np.float32)
    x = np.concatenate([big, -big]) if f.has_sign else big
    for src in (x, x.astype(np.float64)):
        got = cast(src, fmt, saturate=True).astype(np.float32)
        fin = ~np.isnan(src)
        assert np.array_equal(got[fin], np.sign(src[fin]) * np.float32(f.max_finite))
        assert np.isnan(got[~fin]).all() or f.nan == "none"
    y = edge_f32(fmt)
    y = y[np.abs(y) <= f.max_finite]
    assert same_bits(cast(y, fmt, saturate=True), ml_cast(y, fmt))


def test_inputs_of_other_dtypes_and_ints():
    x16 = np.array([1.5, -2.25, 65504], dtype=np.float16)
    assert same_bits(cast(x16, "bfloat16"), x16.astype(np.float32).astype(ml_dtypes.bfloat16))
    ints = np.array([3, 17, -1000, 2**24 + 1], dtype=np.int64)
    got = cast(ints, "float8_e4m3fn").astype(np.float32)
    assert got[:2].tolist() == [3, 16] and np.isnan(got[2:]).all()  # 17 ties to even
    assert float(cast(np.array([2**24 + 1]), "float32")[0]) == 2**24
    sat = cast(np.array([-1000, 17]), "float8_e4m3fn", saturate=True)
    assert sat.astype(float).tolist() == [-448, 16]


def test_int_targets_truncate_and_clamp_floats_wrap_ints():
    x = np.array([3.7, -3.7, 200.0, -300.0, np.nan, np.inf, -0.5], dtype=np.float32)
    assert cast(x, "int8").tolist() == [3, -3, 127, -128, 0, 127, 0]
    assert cast(x, "int4").astype(np.int8).tolist() == [3, -3, 7, -8, 0, 7, 0]
    i = np.array([200, -129, 5], dtype=np.int32)
    assert cast(i, "int8").tolist() == [-56, 127, 5]
    assert cast(i, "int8", saturate=True).tolist() == [127, -128, 5]
    assert round_to(x, "int8").dtype == np.int8


def test_round_to_dtypes_and_wide_formats():
    x = np.array([1 + 2**-30, 1e300], dtype=np.float64)
    assert round_to(x, "float64").dtype == np.float64
    assert round_to(x, "float32").tolist() == [1.0, np.inf]
    assert round_to(x, "bfloat16").dtype == np.float32


def test_unknown_format_lists_known():
    with pytest.raises(UnknownFormatError, match="float4_e2m1fn"):
        cast(np.zeros(2), "float5")
