"""Stochastic rounding (numpy reference and Numba encoder) and 4-bit packing."""

import ml_dtypes
import numpy as np
import pytest

from tests.precision.cases import finite_magnitudes, random_f32, same_bits
from tilepy.precision import (
    cast,
    codecs,
    get_format,
    pack,
    pack_nibbles,
    random_bits,
    stochastic_round,
    unpack,
    unpack_nibbles,
)

SR_FORMATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float6_e3m2fn"]


def _directed(x, fmt, away: bool):
    """Round |x| toward zero / away from zero on the sorted grid (not by bit tricks)."""
    v = finite_magnitudes(fmt)
    ax = np.abs(x.astype(np.float64))
    i = np.searchsorted(v, ax, side="right" if not away else "left")
    idx = np.clip(i - 1 if not away else i, 0, len(v) - 1)
    return np.copysign(v[idx], x).astype(np.float32)


@pytest.mark.parametrize("fmt", SR_FORMATS)
def test_extreme_random_words_give_directed_rounding(fmt):
    f = get_format(fmt)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(20_000) * f.max_finite / 8).astype(np.float32)
    x = x[np.abs(x) <= f.max_finite]
    zero = np.zeros(x.shape, np.uint32)
    ones = np.full(x.shape, 0xFFFFFFFF, np.uint32)
    away = stochastic_round(x, fmt, zero).astype(np.float32)
    toward = stochastic_round(x, fmt, ones).astype(np.float32)
    assert np.array_equal(toward, _directed(x, fmt, away=False))
    assert np.array_equal(away, _directed(x, fmt, away=True))


@pytest.mark.parametrize("fmt", SR_FORMATS)
def test_grid_values_are_kept_and_mean_is_unbiased(fmt):
    v = finite_magnitudes(fmt).astype(np.float32)
    r = random_bits(1, v.shape)
    assert np.array_equal(stochastic_round(v, fmt, r).astype(np.float32), v)
    # between two grid points at fraction 0.3: the mean must be within 5 sigma of x
    lo, hi = v[len(v) // 2], v[len(v) // 2 + 1]
    x = np.full(200_000, lo + np.float32(0.25) * (hi - lo), np.float32)
    y = stochastic_round(x, fmt, random_bits(2, x.shape)).astype(np.float64)
    p = (np.float64(x[0]) - lo) / (hi - lo)
    sigma = (hi - lo) * np.sqrt(p * (1 - p) / x.size)
    assert abs(y.mean() - x[0]) < 5 * sigma


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "bfloat16", "float4_e2m1fn"])
def test_numba_stochastic_encoder_matches_numpy(fmt):
    x = random_f32(200_000, seed=6)
    r = random_bits(7, x.shape)
    got = codecs.encode_sr_array(x, r, fmt, saturate=True)
    assert same_bits(got, stochastic_round(x, fmt, r, saturate=True))
    with pytest.raises(ValueError, match="one word per element"):
        codecs.encode_sr_array(x, r[:5], fmt)


def test_pack_layout_is_low_nibble_first():
    codes = np.array([[0x1, 0x2, 0x3], [0xF, 0x0, 0x9]], np.uint8)
    packed = pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0x03], [0x0F, 0x09]]
    assert unpack_nibbles(packed, 3).tolist() == codes.tolist()


@pytest.mark.parametrize("fmt", ["float4_e2m1fn", "int4"])
def test_pack_roundtrip_all_codes(fmt):
    f = get_format(fmt)
    x = np.arange(16, dtype=np.uint8).view(f.np_dtype)
    x = np.tile(x, (3, 2))[:, :31]  # odd row length
    packed = pack(x, fmt)
    assert packed.shape == (3, 16)
    assert same_bits(unpack(packed, 31, fmt), x)
    with pytest.raises(TypeError):
        pack(x.astype(np.float32), fmt)


def test_pack_of_cast_values():
    x = np.array([0.5, -6.0, 3.0, 1.0], np.float32)
    p = pack(cast(x, "float4_e2m1fn"))
    assert p.tolist() == [0x1 | (0xF << 4), 0x5 | (0x2 << 4)]
    back = unpack(p, 4).astype(np.float32)
    assert back.tolist() == x.tolist()
    assert unpack(p, 4).dtype == ml_dtypes.float4_e2m1fn
