"""Gradient compression: exact byte ratios, seeded and unbiased rounding, error feedback
that conserves mass exactly, and least-squares convergence close to the uncompressed run."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tests.parallel.helpers import launch
from tilepy.parallel import compression as c
from tilepy.precision import cast

RNE = [c.IntBlock(8), c.IntBlock(4), c.Int4Dense(), c.FloatBlock("float8_e4m3fn"),
       c.FloatBlock("float8_e5m2"), c.FloatBlock("float4_e2m1fn"), c.TopK(0.05),
       c.MXBlock("mxfp4"), c.MXBlock("mxfp8_e4m3"), c.MXBlock("mxint8"), c.MXBlock("nvfp4")]
SR = [c.IntBlock(8, stochastic=True), c.Int4Dense(stochastic=True),
      c.FloatBlock("float8_e4m3fn", stochastic=True)]


def grads(n=1024, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) * 10.0 ** rng.integers(-5, 2, n)


@pytest.mark.parametrize("comp,ratio", [
    (c.Int4Dense(), Fraction(1, 8)),  # 64 bytes per 128 elements, scales included
    (c.IntBlock(4), Fraction(17, 128)), (c.FloatBlock("float4_e2m1fn"), Fraction(17, 128)),
    (c.IntBlock(8), Fraction(33, 128)), (c.FloatBlock("float8_e5m2"), Fraction(33, 128)),
    (c.TopK(0.01), Fraction(8 * 41, 4 * 4096)),
    (c.MXBlock("mxfp4"), Fraction(17, 128)), (c.MXBlock("mxfp8_e4m3"), Fraction(33, 128)),
    (c.MXBlock("nvfp4"), Fraction(9 * 4096 // 16 + 4, 4 * 4096)),
], ids=lambda x: getattr(x, "name", str(x)))
def test_exact_byte_ratio_including_metadata(comp, ratio):
    n = 4096
    assert Fraction(comp.encode(grads(n)).size, 4 * n) == ratio
    assert comp.ratio(n) == float(ratio)


@pytest.mark.parametrize("comp", RNE[:3], ids=lambda x: x.name)
def test_int_quantiser_error_at_most_half_a_step(comp):
    v = grads(1000, 1)
    d = comp.decode(comp.encode(v), v.size)
    blocks = c._blocks(v, comp.block)
    step = np.repeat(np.ldexp(1.0, c.pow2_exponents(blocks, comp.qmax)), comp.block)[:v.size]
    assert np.all(np.abs(d - v) <= step / 2)
    assert np.any(d != v)


@pytest.mark.parametrize("scheme", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8", "nvfp4"])
def test_mx_compressor_is_precisions_quantiser(scheme):
    from tilepy.precision import dequantize, quantize

    v = grads(96, 6)  # a multiple of the block: no padding
    comp = c.MXBlock(scheme)
    want = dequantize(quantize(v, scheme)).astype(np.float64)
    assert np.array_equal(comp.decode(comp.encode(v), v.size), want)
    w = grads(50, 7)  # padded to whole blocks, cut back on decode
    assert comp.decode(comp.encode(w), w.size).shape == (50,)


def test_fp8_elements_are_precision_casts():
    v = grads(64, 2)
    comp = c.FloatBlock("float8_e4m3fn", block=64)
    d = comp.decode(comp.encode(v), v.size)
    s = np.ldexp(1.0, c.pow2_exponents(v[None, :], 448.0))[0]
    want = cast(v / s, "float8_e4m3fn", saturate=True).astype(np.float64) * s
    assert np.array_equal(d, want)


@pytest.mark.parametrize("comp", SR, ids=lambda x: x.name)
def test_stochastic_rounding_is_seeded(comp):
    v = grads(512, 3)
    assert np.array_equal(comp.encode(v, seed=5), comp.encode(v, seed=5))
    assert not np.array_equal(comp.encode(v, seed=5), comp.encode(v, seed=6))


def quantum(comp, v: np.ndarray) -> np.ndarray:
    """Spacing of the representable values around each element (scale included)."""
    qmax = comp.fmt.max_finite if hasattr(comp, "fmt") else comp.qmax
    blocks = c._blocks(v, comp.block)
    s = np.repeat(np.ldexp(1.0, c.pow2_exponents(blocks, qmax)), comp.block)[:v.size]
    if not hasattr(comp, "fmt"):
        return s
    emin = 1 - comp.fmt.bias
    e = np.maximum(np.floor(np.log2(np.abs(v / s))), emin)
    return np.ldexp(1.0, (e - comp.fmt.man_bits).astype(int)) * s


@pytest.mark.parametrize("comp", SR, ids=lambda x: x.name)
def test_stochastic_quantiser_is_unbiased(comp):
    v = grads(256, 4) * 0.37
    trials = 400
    outs = np.array([comp.decode(comp.encode(v, seed=s), v.size) for s in range(trials)])
    q = quantum(comp, v)
    assert np.all(np.abs(outs - v) < q)  # each trial lands on a neighbour of v
    # a trial is a Bernoulli step of size q: standard deviation <= q / 2
    assert np.all(np.abs(outs.mean(0) - v) <= 5 * (q / 2) / np.sqrt(trials))
    # the deterministic nearest rounding has a bias that the mean of trials does not
    nc = _nearest(comp)
    nearest = nc.decode(nc.encode(v), v.size)
    assert np.mean(np.abs(outs.mean(0) - v)) < 0.5 * np.mean(np.abs(nearest - v))


def _nearest(comp):
    clone = object.__new__(type(comp))
    clone.__dict__.update(comp.__dict__, stochastic=False)
    return clone


@pytest.mark.parametrize("comp", RNE, ids=lambda x: x.name)
def test_error_feedback_conserves_mass_exactly(comp):
    ef = c.ErrorFeedback(comp, 1000)
    for t in range(5):
        g = grads(1000, 10 + t)
        owed = g + ef.residual
        buf, d = ef.encode(g, seed=t)
        assert np.array_equal(d + ef.residual, owed)  # bit for bit, every element
        assert np.array_equal(d, comp.decode(buf, 1000))


A_ROWS, DIM, RANKS = 512, 64, 4


def _least_squares(comm, make, steps=200, lr=0.5):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((A_ROWS, DIM))
    b = A @ rng.standard_normal(DIM) + 0.01 * rng.standard_normal(A_ROWS)
    rows = slice(comm.rank * A_ROWS // RANKS, (comm.rank + 1) * A_ROWS // RANKS)
    x, sent = np.zeros(DIM), 0
    ef = c.ErrorFeedback(make(), DIM) if make else None
    for t in range(steps):
        g = A[rows].T @ (A[rows] @ x - b[rows]) / A_ROWS
        if ef is None:
            total = comm.allreduce(g)
        else:
            total, s = c.compressed_allreduce(comm, g, ef, seed=t)
            sent += s
        x = x - lr * total
    return x, sent


@pytest.mark.parametrize("make", [c.Int4Dense, lambda: c.IntBlock(4, stochastic=True),
                                  lambda: c.FloatBlock("float8_e4m3fn"),
                                  lambda: c.FloatBlock("float4_e2m1fn"), lambda: c.TopK(0.1),
                                  lambda: c.MXBlock("mxfp4"), lambda: c.MXBlock("nvfp4")])
def test_least_squares_converges_like_uncompressed(make):
    base = launch(_least_squares, RANKS, None)[0][0]
    res = launch(_least_squares, RANKS, make)
    x, sent = res[0]
    # stated tolerance: parameters within 1e-3 (relative) of the uncompressed run's
    assert np.linalg.norm(x - base) / np.linalg.norm(base) < 1e-3
    assert all(np.array_equal(r[0], x) for r in res)  # every rank holds the same model
    assert 0 < sent < 200 * (RANKS - 1) * DIM * 4


def test_powersgd_is_exact_on_low_rank_and_counts_bytes():
    rng = np.random.default_rng(5)
    u = rng.standard_normal((40, 2))  # a shared column space: the sum has rank 2
    mats = [u @ rng.standard_normal((2, 30)) for _ in range(3)]

    def body(comm):
        psgd = c.PowerSGD((40, 30), rank=2, seed=1)
        for _ in range(3):
            approx, sent = psgd.allreduce(comm, mats[comm.rank])
        return approx, sent

    approx, sent = launch(body, 3)[0]
    assert np.allclose(approx, sum(mats), rtol=1e-9, atol=1e-9)
    assert sent == int(2 * 2 / 3 * 8 * (40 * 2 + 30 * 2))
