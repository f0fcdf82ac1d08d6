"""Numba codecs against ml_dtypes: every code decodes identically, encoders match on all
edge cases and ~1M random float32 inputs (all 2^32 under `make test-exhaustive`)."""

import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from tests.precision.cases import FLOAT_NARROW, edge_f32, ml_cast, random_f32, same_bits
from tilepy.precision import cast, codecs, get_format, round_to

RANDOM = random_f32(1 << 20, seed=3)
EXHAUSTIVE = os.environ.get("TILEPY_EXHAUSTIVE") == "1"


def _all_storage_codes(fmt):
    f = get_format(fmt)
    return np.arange(1 << (8 * f.itemsize), dtype=np.uint64).astype(f.storage)


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
def test_every_code_decodes_like_ml_dtypes(fmt):
    f = get_format(fmt)
    codes = _all_storage_codes(fmt)  # every byte value, even fp6/fp4's unused high bits
    want = codes.view(f.np_dtype).astype(np.float32)
    assert same_bits(codecs.decode_array(codes, fmt), want)
    if f.bits <= 8:
        n = 1 << f.bits
        assert same_bits(codecs.decode_table(fmt), want[:n])


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
@pytest.mark.parametrize("saturate", [False, True])
def test_encoder_matches_cast(fmt, saturate):
    x = np.concatenate([edge_f32(fmt), RANDOM])
    got = codecs.encode_array(x, fmt, saturate=saturate)
    f = get_format(fmt)
    assert got.dtype == f.storage
    assert same_bits(got, cast(x, fmt, saturate=saturate))
    if not saturate:
        assert same_bits(got, ml_cast(x, fmt))


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_int_codecs_match_cast(fmt):
    x = np.concatenate([RANDOM[:1000], np.float32([3.7, -3.7, 200, -300, np.nan, -0.5, 7.5])])
    codes = codecs.encode_array(x, fmt)
    want = cast(x, fmt).view(np.uint8)
    assert np.array_equal(codes, want)
    all_codes = np.arange(1 << get_format(fmt).bits, dtype=np.uint8)
    want_vals = all_codes.view(get_format(fmt).np_dtype).astype(np.float32)
    assert np.array_equal(codecs.decode_array(all_codes, fmt), want_vals)


def test_scalar_codecs_inside_another_kernel():
    enc = codecs.encoder("float8_e4m3fn", saturate=True)
    dec = codecs.decoder("float8_e4m3fn")

    @numba.njit
    def roundtrip_sum(x):
        s = np.float32(0)
        for i in range(x.size):
            s += dec(enc(x[i]))
        return s

    x = np.float32([1.0, 1000.0, -0.3, 17.0])
    assert roundtrip_sum(x) == np.float32(1 + 448 - 0.3125 + 16)
    assert codecs.encoder("e4m3", True) is enc  # looked up by table name or alias


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2",
                                 "float4_e2m1fn", "float8_e8m0fnu"])
def test_float64_encoder_rounds_once_like_cast(fmt):
    rng = np.random.default_rng(8)
    x32 = np.concatenate([edge_f32(fmt), RANDOM[:100_000]])
    tiny = np.ldexp(1.0, -rng.integers(25, 52, x32.size))
    with np.errstate(all="ignore"):
        x = np.concatenate([x32.astype(np.float64) * (1 + tiny), x32 * (1 - tiny), [1e300]])
    for saturate in (False, True):
        assert same_bits(codecs.encode_array(x, fmt, saturate), cast(x, fmt, saturate))


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e4m3fn"])
def test_rounder_is_round_to(fmt):
    r = codecs.rounder(fmt)

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = r(x[i])

    x = np.concatenate([edge_f32(fmt), RANDOM[:100_000]])
    out = np.empty_like(x)
    run(x, out)
    assert same_bits(out, round_to(x, fmt))


@pytest.mark.parametrize("n", [0, 1, 31, 33, 1000, codecs._TASK + 7, codecs._STREAM_MIN + 45])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_bf16_arrays_at_any_size_and_alignment(n, offset):
    """The bf16 array kernels (vector body, scalar head and tail, cache-bypassing stores
    from _STREAM_MIN elements, which need 64-byte alignment) give ml_dtypes' bits for
    views starting at any element, into new and into given outputs."""
    bits = np.random.default_rng(n + offset).integers(0, 2**32, n + 3, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32)[offset:offset + n]  # NaNs of both signs
    want = ml_cast(x, "bfloat16")
    assert same_bits(codecs.encode_array(x, "bfloat16"), want)
    out = np.empty(n + 3, np.uint16)[offset:offset + n]
    assert codecs.encode_array(x, "bfloat16", out=out) is out and same_bits(out, want)
    codes = np.empty(n + 3, np.uint16)[offset:offset + n]
    codes[...] = bits[:n] & 0xFFFF  # every kind of code, NaN payloads included
    values = codes.view(get_format("bfloat16").np_dtype).astype(np.float32)
    assert same_bits(codecs.decode_array(codes, "bfloat16"), values)
    vout = np.empty(n + 3, np.float32)[offset:offset + n]
    assert codecs.decode_array(codes, "bfloat16", out=vout) is vout
    assert np.array_equal(vout.view(np.uint32), values.view(np.uint32))


def test_array_codecs_reject_a_wrong_out():
    x = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"out must be a uint16\[8\] array; got uint8\[8\]"):
        codecs.encode_array(x, "bfloat16", out=np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match=r"out must be a float32\[8\] array; got float32\[4\]"):
        codecs.decode_array(np.zeros(8, np.uint16), "bfloat16", out=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        codecs.decode_array(np.zeros(8, np.uint16), "bf16", out=np.zeros(16, np.float32)[::2])


def test_import_precision_does_not_import_numba():
    code = "import sys, tilepy.precision; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


SWEEP = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"]


@pytest.mark.exhaustive
@pytest.mark.skipif(not EXHAUSTIVE, reason="2^32-input sweep: run by make test-exhaustive "
                    "(TILEPY_EXHAUSTIVE=1); CI covers edge cases and 1M random inputs")
@pytest.mark.parametrize("fmt", SWEEP)
def test_every_float32_encodes_like_ml_dtypes(fmt):
    f = get_format(fmt)
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        want = ml_cast(x, fmt)
        assert same_bits(codecs.encode_array(x, fmt), want), hex(start)
        clipped = np.clip(x, -f.max_finite, f.max_finite)
        assert same_bits(codecs.encode_array(x, fmt, True), ml_cast(clipped, fmt)), hex(start)
        assert same_bits(round_to(x, fmt), want.view(f.np_dtype).astype(np.float32)), hex(start)


@pytest.mark.exhaustive
@pytest.mark.skipif(not EXHAUSTIVE, reason="2^32-input sweep: run by make test-exhaustive "
                    "(TILEPY_EXHAUSTIVE=1); CI covers edge cases and 1M random inputs")
@pytest.mark.parametrize("fmt", [f for f in FLOAT_NARROW if f not in SWEEP])
def test_every_float32_encodes_like_ml_dtypes_other_formats(fmt):
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        assert same_bits(codecs.encode_array(x, fmt), ml_cast(x, fmt)), hex(start)


@pytest.mark.parametrize("fmt", FLOAT_NARROW)
def test_code_spec_constants_agree_with_the_table(fmt):
    from tilepy.precision.codespec import code_spec

    f, s = get_format(fmt), code_spec(fmt)
    table = codecs.decode_table(fmt) if f.bits <= 8 else None
    value = (lambda c: float(table[c])) if table is not None else (
        lambda c: float(np.array([c], f.storage).view(f.np_dtype).astype(np.float32)[0]))
    assert value(s.max_code) == f.max_finite
    assert np.isnan(value(s.nan_pos)) or s.nan_rule == "flipzero"
    if f.has_inf:
        assert value(s.ovf_pos) == np.inf and value(s.ovf_neg) == -np.inf
