"""Tile ops: copy (conversion, edge tiles), fill, gemm (order, transposes, dtypes),
reductions, cumsum and atomic adds, against independent numpy formulations."""

import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.interpreter import kernels as K
from tests.interpreter.oracle import (
    gamma,
    np_dtype,
    random_values,
    round_once_bf16,
    same,
    seq_cumsum,
    seq_fold,
    seq_gemm,
)
from tilepy.interpreter import run

seeds = st.integers(0, 2**32 - 1)
cached = functools.lru_cache(maxsize=None)


# ---------------------------------------------------------------- copy and fill


@pytest.mark.parametrize("src,mid", [("float32", "bfloat16"), ("float32", "float8_e4m3fn"),
                                     ("float32", "float16"), ("bfloat16", "float32"),
                                     ("float32", "int8"), ("int32", "float32"),
                                     ("float8_e5m2", "float32"), ("float32", "float8_e5m2"),
                                     ("float4_e2m1fn", "bfloat16")])
@given(seed=seeds)
def test_copy_converts_like_a_store(src, mid, seed):
    rng = np.random.default_rng(seed)
    x = random_values(rng, (37, 45), src, specials=src == "float32")
    if src == "float32":
        x = (x * np.float32(100)).astype(np.float32)  # reach int8 clamping and e4m3 overflow
    y = np.zeros((37, 45), np.float32)
    run(cached(K.tile_copy)(37, 45, 16, 32, src, mid, "float32").func, dict(X=x, Y=y), {})
    if mid == "int8":
        expect = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64))), -128, 127)
        expect = expect.astype(np.int8)  # truncate toward zero, clamp, NaN -> 0
    else:
        expect = x.astype(np_dtype(mid))
    assert same(y, np.asarray(expect).astype(np.float32))


@given(seed=seeds)
def test_copy_from_float64_rounds_once(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 32)) * 10
    # ties that rounding twice (via float32) gets wrong
    x[0, :4] = [1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 3 * (1 + 2**-8 + 2**-29), 1.0]
    y = np.zeros((16, 32), ml_dtypes.bfloat16)
    run(cached(K.tile_copy)(16, 32, 16, 32, "float64", "bfloat16", "bfloat16").func,
        dict(X=x, Y=y), {})
    assert same(y, round_once_bf16(x))
    assert float(y[0, 0]) == 1 + 2**-7  # float32 first would give 1.0


@given(seed=seeds, m=st.integers(1, 40), n=st.integers(1, 40))
def test_edge_tiles_read_zero_and_drop_writes(seed, m, n):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    k = cached(K.edge_pad)(m, n, 16, 8)
    y = np.full((-(-m // 16) * 16, -(-n // 8) * 8), np.nan, np.float32)
    run(k.func, dict(X=x, Y=y), {})
    expect = np.zeros_like(y)
    expect[:m, :n] = x
    assert same(y, expect)
    back = np.full((m, n), np.nan, np.float32)  # the reverse: writes past the end dropped
    run(cached(K.tile_copy)(m, n, 16, 8, "float32", "float32", "float32").func,
        dict(X=x, Y=back), {})
    assert same(back, x)


@pytest.mark.parametrize("dtype,value", [("float32", 2.5), ("bfloat16", 0.1), ("int8", -3)])
def test_fill_rounds_value_and_clips_edge(dtype, value):
    y = np.zeros((10, 8), np_dtype(dtype))
    run(K.fill_rows(10, 8, 4, dtype, value).func, dict(Y=y), {})
    assert same(y, np.full((10, 8), value).astype(np_dtype(dtype)))


# ---------------------------------------------------------------- gemm


GEMM_CASES = [("float16", False, False, False), ("bfloat16", True, False, True),
              ("float8_e4m3fn", False, True, False), ("float32", True, True, True),
              ("float32", False, False, False)]


@pytest.mark.parametrize("in_dt,ta,tb,clear", GEMM_CASES)
@given(seed=seeds)
def test_gemm_is_sequential_k_in_the_accumulator(in_dt, ta, tb, clear, seed):
    rng = np.random.default_rng(seed)
    M, N, Kd = 48, 40, 56  # edge tiles in M and K (tiles 32 x 16 x 16), N whole
    a = random_values(rng, (M, Kd), in_dt)
    b = random_values(rng, (Kd, N), in_dt)
    c0 = random_values(rng, (M, N), "float32")
    c = c0.copy()
    k = cached(K.gemm)(M, N, Kd, 32, 16, 16, in_dt, "float32", ta, tb, clear)
    run(k.func, dict(A=a.T.copy() if ta else a, B=b.T.copy() if tb else b, C=c), {})
    start = np.zeros_like(c0) if clear else c0
    assert same(c, seq_gemm(a, b, start, "float32", k_pad=64))
    # and against float64 within the bound of K + 1 roundings (+1 for rounded products)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = start.astype(np.float64) + a64 @ b64
    scale = np.abs(start) + np.abs(a64) @ np.abs(b64)
    bound = gamma(Kd + 2, 2.0**-24) * scale
    assert np.all(np.abs(c - exact) <= bound)


def test_gemm_with_float16_accumulator_rounds_each_step():
    rng = np.random.default_rng(1)
    a = random_values(rng, (32, 24), "float16")
    b = random_values(rng, (24, 16), "float16")
    c0 = random_values(rng, (32, 16), "float16")
    c = c0.copy()
    run(K.gemm(32, 16, 24, 16, 16, 8, "float16", "float16").func, dict(A=a, B=b, C=c), {})
    assert same(c, seq_gemm(a, b, c0, "float16"))
    assert not same(c, seq_gemm(a, b, c0, "float32").astype(np.float16))  # it matters


@given(seed=seeds)
def test_gemm_clear_accum_ignores_old_values(seed):
    rng = np.random.default_rng(seed)
    a = random_values(rng, (16, 12), "bfloat16")
    b = random_values(rng, (12, 8), "bfloat16")
    c = np.full((16, 8), np.nan, np.float32)
    run(cached(K.gemm_clear_accum)(16, 8, 12, "bfloat16").func, dict(A=a, B=b, C=c), {})
    assert same(c, seq_gemm(a, b, np.zeros((16, 8)), "float32"))


# ---------------------------------------------------------------- reductions


def _identity(kind, dtype):
    if kind in ("sum", "abssum", "absmax"):
        return 0
    if np_dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return -np.inf if kind == "max" else np.inf


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype,clear", [("float32", True), ("float32", False),
                                         ("bfloat16", True), ("int32", False)])
@given(seed=seeds)
def test_reduce_folds_in_order(kind, dim, dtype, clear, seed):
    rng = np.random.default_rng(seed)
    bm, n, blocks = 4, 24, 3
    x = random_values(rng, (blocks * bm, n), dtype, specials=True)
    out_len = bm if dim == 1 else n
    y0 = random_values(rng, (blocks, out_len), dtype)
    y = y0.copy()
    run(cached(K.reduce_rows)(kind, bm, n, dim, dtype, dtype, clear, blocks).func,
        dict(X=x, Y=y), {})
    for blk in range(blocks):
        tile = x[blk * bm:(blk + 1) * bm]
        init = y0[blk] if not clear else np.full(out_len, _identity(kind, dtype))
        expect = seq_fold(tile, dim, kind, init, dtype)
        assert same(y[blk], expect), (blk, y[blk], expect)


def test_max_keeps_the_first_of_equal_zeros_and_the_first_nan():
    x = np.zeros((12, 24), np.float32)
    x[0, :3] = [-0.0, 0.0, -0.0]  # row 0 of block 0, dim 1: first is -0.0
    x[1, :] = -1.0
    x[1, 5], x[1, 9] = 0.0, -0.0
    x[2, 4] = np.nan
    x[3, :] = -0.0
    y = np.zeros((3, 4), np.float32)
    run(cached(K.reduce_rows)("max", 4, 24, 1, "float32", "float32", True, 3).func,
        dict(X=x, Y=y), {})
    assert np.signbit(y[0, 0]) and not np.signbit(y[0, 1]) and np.isnan(y[0, 2])
    assert y[0, 3] == 0 and np.signbit(y[0, 3])  # -inf, then -0.0 kept through the ties


# ---------------------------------------------------------------- cumsum


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@given(seed=seeds)
def test_cumsum_runs_in_order(dim, reverse, dtype, seed):
    rng = np.random.default_rng(seed)
    x = random_values(rng, (6, 9), dtype, specials=dtype == "float32")
    y = np.zeros_like(x)
    run(cached(K.cumsum_tile)(6, 9, dim, reverse, dtype).func, dict(X=x, Y=y), {})
    assert same(y, seq_cumsum(x, dim, reverse, dtype))


# ---------------------------------------------------------------- atomics


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@given(seed=seeds)
def test_region_atomic_add_in_block_order(dtype, seed):
    rng = np.random.default_rng(seed)
    x = random_values(rng, (5 * 4, 6), dtype)
    y0 = random_values(rng, (4, 6), dtype)
    y = y0.copy()
    run(cached(K.split_k)(4, 6, 5, dtype).func, dict(X=x, Y=y), {})
    expect = y0.copy()
    for s in range(5):
        expect = expect + x[s * 4:(s + 1) * 4]
    assert same(y, expect)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@given(seed=seeds)
def test_lane_atomic_add_with_collisions_in_lane_order(dtype, seed):
    rng = np.random.default_rng(seed)
    n, bins = 150, 4
    idx = rng.integers(0, bins, n).astype(np.int32)
    w = random_values(rng, n, dtype)
    if dtype == "float32":
        w = (w * np.float32(10.0) ** rng.integers(-6, 6, n)).astype(np.float32)
    h = np.zeros(bins, np_dtype(dtype))
    run(cached(K.histogram)(n, 32, bins, dtype).func, dict(Idx=idx, W=w, H=h), {})
    expect = np.zeros(bins, np_dtype(dtype))
    for j in range(n):  # block order, then lane order
        expect[idx[j]] = expect[idx[j]] + w[j]
    assert same(h, expect)


def _signed_zero_gemm():
    import tilepy.language as T

    @T.prim_func
    def acc_gemm(A: T.Tensor((32, 16), "float32"), B: T.Tensor((16, 32), "float32"),
                 C: T.Tensor((32, 32), "float32")):
        with T.Kernel(2, 2) as (bx, by):
            a_s = T.alloc_shared((16, 16), "float32")
            b_s = T.alloc_shared((16, 16), "float32")
            c_l = T.alloc_fragment((16, 16), "float32")
            T.copy(C[by * 16, bx * 16], c_l)
            T.copy(A[by * 16, 0], a_s)
            T.copy(B[0, bx * 16], b_s)
            T.gemm(a_s, b_s, c_l)
            T.copy(c_l, C[by * 16, bx * 16])

    return acc_gemm


@pytest.mark.parametrize("c_start", ["+0", "-0 and values"])
def test_gemm_products_keep_signed_zeros(c_start):
    """The gemm's fast outer products (einsum: +0 for a -0 product) must give the sequential
    sums bit for bit, signs of zero included, whatever C starts from."""
    rng = np.random.default_rng(11)
    vals, odds = np.array([0.0, -0.0, 1.5, -2.25], np.float32), [0.45, 0.45, 0.05, 0.05]
    zeros = lambda shape: rng.choice(vals, shape, p=odds)  # noqa: E731
    a, b = zeros((32, 16)), zeros((16, 32))
    c = np.zeros((32, 32), np.float32)
    if c_start != "+0":
        c = rng.choice(np.array([-0.0, 0.0, 3.0], np.float32), (32, 32))
        a[0, :], b[:, 0], c[0, 0] = 1.5, -0.0, -0.0  # every product -0: C[0, 0] stays -0
    want = c.copy()
    for k in range(16):  # the contract: c = c + a*b, k ascending, float32 each op
        want = want + a[:, k:k + 1] * b[k:k + 1, :]
    run(_signed_zero_gemm().func, dict(A=a, B=b, C=c), {})
    assert np.array_equal(c.view(np.uint32), want.view(np.uint32))
    assert c_start == "+0" or np.any((c == 0) & np.signbit(c))  # -0 really survived
