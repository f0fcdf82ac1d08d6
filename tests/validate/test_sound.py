"""The sound tier never flags an output that a backend following the config could return:
outputs simulated here by other orders and roundings than tilepy's (sequential and blocked
float32 sums, TF32 by truncation, fp8 truncating accumulators, bf16 intermediates), on
data with heavy cancellation, at the largest error each simulation makes."""

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tilepy.precision.gemm import scaled_gemm
from tilepy.validation.models import round_mantissa
from tilepy.validation.ops import fp8_accumulate

BF16 = ml_dtypes.bfloat16


def _cancelling(rng, shape):
    """Normal data with a few huge entries of both signs: partial sums far above the
    result, so every rounding counts."""
    x = rng.standard_normal(shape)
    mask = rng.random(shape) < 0.05
    return np.where(mask, x * 1e4, x).astype(np.float32)


def _sequential(a, b, dtype=np.float32):
    acc = np.zeros((a.shape[0], b.shape[1]), dtype)
    for k in range(a.shape[1]):
        acc = (acc + (a[:, k:k + 1].astype(dtype) * b[k:k + 1].astype(dtype))).astype(dtype)
    return acc


@pytest.mark.parametrize("seed", range(3))
def test_float32_gemms_in_any_order(seed):
    rng = np.random.default_rng(seed)
    a, b = _cancelling(rng, (24, 300)), _cancelling(rng, (300, 20))
    for out in (_sequential(a, b), a @ b, _sequential(a[:, ::-1], b[::-1]),
                sum(a[:, i::4] @ b[i::4] for i in range(4)).astype(np.float32)):
        rep = tilepy.validate(out, "gemm", (a, b))
        assert rep.sound_passed, str(rep)


def test_tf32_by_truncation_and_by_rounding():
    rng = np.random.default_rng(5)
    a, b = _cancelling(rng, (16, 512)), _cancelling(rng, (512, 16))
    for mode in ("nearest", "truncate"):
        ta, tb = round_mantissa(a, 10, mode), round_mantissa(b, 10, mode)
        out = _sequential(ta.astype(np.float32), tb.astype(np.float32))
        assert tilepy.validate(out, "gemm", (a, b), accumulate="tf32").sound_passed


def test_bf16_outputs_and_bf16_accumulation():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((16, 256)).astype(BF16)
    b = rng.standard_normal((256, 12)).astype(BF16)
    out = _sequential(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    assert tilepy.validate(out, "gemm", (a, b)).sound_passed
    acc = np.zeros((16, 12), np.float32)
    for k in range(256):  # every partial sum rounded to bf16
        p = a[:, k:k + 1].astype(np.float32) * b[k:k + 1].astype(np.float32)
        acc = (acc + p).astype(BF16).astype(np.float32)
    rep = tilepy.validate(acc.astype(BF16), "gemm", (a, b), accumulate="bf16")
    assert rep.sound_passed
    assert not tilepy.validate(acc.astype(BF16), "gemm", (a, b)).sound_passed


def test_fp8_accumulators_sequential_and_blocked():
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((8, 2048)) * 4).astype(ml_dtypes.float8_e4m3fn)
    b = (rng.standard_normal((2048, 8)) * 4).astype(ml_dtypes.float8_e4m3fn)
    p = a.astype(np.float64)[:, None, :] * b.astype(np.float64).T[None]
    fast = [scaled_gemm(a, b.T.copy(), "truncate", mantissa_bits=13),
            fp8_accumulate(p, 14, 0, False), fp8_accumulate(p, 13, 0, True)]
    for out in fast:
        rep = tilepy.validate(np.asarray(out, np.float32), "scaled_gemm", (a, b),
                              accumulate="fast")
        assert rep.sound_passed
    prom = fp8_accumulate(p, 13, 128, False).astype(np.float32)
    assert tilepy.validate(prom, "scaled_gemm", (a, b), accumulate="promote").sound_passed
    assert not tilepy.validate(fast[0], "scaled_gemm", (a, b), accumulate="promote").passed


def test_layernorm_variance_algorithms_on_data_with_a_large_mean():
    """E[x^2] - mu^2 in float32 cancels completely when |mean| >> std: by default (any
    algorithm) the bound then says nothing (infinite, and the report notes it); with
    variance="two_pass" a two-pass output is bounded and within."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((32, 512)) + 300).astype(np.float32)
    g, b = rng.standard_normal(512).astype(np.float32), rng.standard_normal(512).astype(np.float32)
    n = np.float32(512)
    mu = np.sum(x, -1, keepdims=True, dtype=np.float32) / n
    var1 = np.maximum(np.sum(x * x, -1, keepdims=True, dtype=np.float32) / n - mu * mu, 0)
    one = (x - mu) * (np.float32(1) / np.sqrt(var1 + np.float32(1e-5))) * g + b
    rep = tilepy.validate(one.astype(np.float32), "layernorm", (x, g, b))
    assert rep.sound_passed and np.isinf(rep.bound).all()
    assert any("no finite bound" in n for n in rep.notes)
    d = x - mu
    var2 = np.sum(d * d, -1, keepdims=True, dtype=np.float32) / n
    two = d * (np.float32(1) / np.sqrt(var2 + np.float32(1e-5))) * g + b
    rep = tilepy.validate(two.astype(np.float32), "layernorm", (x, g, b), variance="two_pass")
    assert rep.sound_passed and np.isfinite(rep.bound).all() and rep.max_ratio > 1e-3
    assert not tilepy.validate(one.astype(np.float32), "layernorm", (x, g, b),
                               variance="two_pass").sound_passed


def _online_softmax(x):
    m = np.full((x.shape[0], 1), -np.inf, np.float32)
    s = np.zeros((x.shape[0], 1), np.float32)
    for c in range(0, x.shape[1], 32):
        blk = x[:, c:c + 32]
        new = np.maximum(m, blk.max(-1, keepdims=True))
        s = s * np.exp(m - new) + np.exp(blk - new).sum(-1, keepdims=True, dtype=np.float32)
        m = new
    return (np.exp(x - m) / s).astype(np.float32)


def test_online_softmax_in_chunks_of_32():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((16, 1000)) * 8).astype(np.float32)
    assert tilepy.validate(_online_softmax(x), "softmax", (x,)).sound_passed
    xb = x.astype(BF16)
    yb = _online_softmax(xb.astype(np.float32)).astype(BF16)
    assert tilepy.validate(yb, "softmax", (xb,)).sound_passed


def test_a_simulated_tf32_conv_is_classified_as_tf32():
    from tilepy.validation.ops import conv_nchw

    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    xt = round_mantissa(x, 10).astype(np.float32)
    wt = round_mantissa(w, 10).astype(np.float32)
    out = conv_nchw(xt, wt, (1, 1), (1, 1), (1, 1), 1, dtype=np.float32)
    rep = tilepy.validate(out, "conv2d", (x, w), padding=1, accumulate="tf32")
    assert rep.passed
    assert rep.stats.summary.startswith("consistent with tf32, not with fp32")
