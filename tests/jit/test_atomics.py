"""Atomic adds in the JIT: launches run their blocks in parallel (per-block logs replayed
in block order) and give the interpreter's bits, for float32, bfloat16 and int32, with 1
and 2 Numba threads. The data make the order of the adds matter, so a wrong order fails."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import tilepy.jit as jit
import tilepy.language as T
from tests.interpreter import kernels as K
from tests.jit.oracle import assert_same_bits, both
from tilepy.kernels import gemm_split_k

cached = functools.lru_cache(maxsize=None)
N, BLOCK, BINS = 600, 64, 3


def _threads(t: int):
    import numba

    numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))


def _in_order(idx, w, h0, dt):
    """The interpreter's order by hand: block order, then lane order."""
    h = h0.copy()
    with np.errstate(over="ignore"):  # int32 wraps, as the kernel's adds do
        for j in range(len(idx)):
            h[idx[j]] = (h[idx[j]] + w[j]).astype(dt)
    return h


def _weights(rng, dtype: str) -> np.ndarray:
    if dtype == "int32":  # wraps around: still exact in any order, so bits must agree
        return rng.integers(-2**31, 2**31 - 1, N, dtype=np.int64).astype(np.int32)
    big = rng.choice([1.0, 3.0e7, -3.0e7, 257.0], N)  # absorbed or not depending on order
    w = big * rng.uniform(0.5, 1.5, N)
    return w.astype(np.float32 if dtype == "float32" else ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_histogram_atomics_run_in_parallel_with_the_interpreters_bits(dtype):
    func = cached(K.histogram)(N, BLOCK, BINS, dtype).func
    src = jit.source(func)
    assert "in prange(" in src and "per-block logs" in src
    rng = np.random.default_rng(7)
    idx = rng.integers(0, BINS, N).astype(np.int32)
    w = _weights(rng, dtype)
    h0 = np.zeros(BINS, w.dtype)
    want = _in_order(idx, w, h0, w.dtype)
    if dtype != "int32":  # the data are order-sensitive: reversed blocks give other bits
        perm = np.concatenate([np.arange(s, min(s + BLOCK, N)) for s in
                               range(0, N, BLOCK)][::-1])
        assert not np.array_equal(want, _in_order(idx[perm], w[perm], h0, w.dtype))
    arrays = dict(Idx=idx, W=w, H=h0)
    for threads in (1, 2):
        _threads(threads)
        interp, got = both(func, arrays, {})
        assert_same_bits(want, interp["H"], f"interpreter {dtype}")
        assert_same_bits(interp["H"], got["H"], f"jit {dtype} {threads} threads")
    _, got = both(func, arrays, {}, tier="py")
    assert_same_bits(want, got["H"], f"py tier {dtype}")


def test_split_k_gemm_with_atomic_adds_matches_the_interpreter():
    func = gemm_split_k(16, 32, 8, 3).func
    src = jit.source(func)
    assert "in prange(" in src and "_replay" in src
    rng = np.random.default_rng(11)
    M, N_, K_ = 37, 45, 70  # edge tiles in every direction, a ragged last slice
    a = (rng.standard_normal((M, K_)) * 10.0 ** rng.integers(-3, 4, (M, K_))).astype(np.float32)
    b = rng.standard_normal((K_, N_)).astype(np.float32)
    c0 = rng.standard_normal((M, N_)).astype(np.float32)
    arrays, sizes = dict(A=a, B=b, C=c0), {"M": M, "N": N_, "K": K_}
    results = []
    for threads in (1, 2):
        _threads(threads)
        interp, got = both(func, arrays, sizes)
        assert_same_bits(interp["C"], got["C"], f"split-K gemm, {threads} threads")
        results.append(got["C"])
    assert not np.array_equal(results[0], c0)
    # the partial tiles' order matters: adding the slices in reverse gives other bits
    per = -(-K_ // (8 * 3)) * 8
    parts = [a[:, s * per:(s + 1) * per].astype(np.float64) @ b[s * per:(s + 1) * per]
             for s in range(3)]
    fwd, rev = c0.copy(), c0.copy()
    for p in parts:
        fwd = (fwd + p.astype(np.float32)).astype(np.float32)
    for p in parts[::-1]:
        rev = (rev + p.astype(np.float32)).astype(np.float32)
    assert not np.array_equal(fwd, rev)


def readback(n: int, block: int):
    """Blocks add into H then read it: they must see earlier blocks' adds, so this launch
    stays serial (range) in the JIT."""

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), H: T.Tensor((1,), "float32"),
          Seen: T.Tensor((n // block,), "float32")):
        with T.Kernel(n // block) as bx:
            for i in T.Parallel(block):
                T.atomic_add(H[0], X[bx * block + i])
            Seen[bx] = H[0]

    return k


def test_a_launch_that_reads_its_atomic_destination_stays_serial():
    func = cached(readback)(256, 32).func
    src = jit.source(func)
    assert "blocks run in order (range)" in src and "_replay" not in src
    rng = np.random.default_rng(5)
    x = (rng.choice([1.0, 1e8, -1e8], 256) * rng.uniform(0.5, 1.5, 256)).astype(np.float32)
    arrays = dict(X=x, H=np.zeros(1, np.float32), Seen=np.zeros(8, np.float32))
    interp, got = both(func, arrays, {})
    for name in ("H", "Seen"):
        assert_same_bits(interp[name], got[name], name)


def test_log_sizes_come_from_the_loop_bounds():
    from tilepy.jit.lower import lower

    src = lower(gemm_split_k(16, 32, 8, 3).func).source
    assert "np.int64(512)" in src  # 16 x 32 tile: one logged add per element per block
    hist = lower(cached(K.histogram)(N, BLOCK, BINS, "float32").func).source
    assert f"np.int64({BLOCK})" in hist  # one add per lane


@T.prim_func
def two_adds_per_lane(X: T.Tensor((64,), "float32"), H: T.Tensor((2,), "float32")):
    with T.Kernel(1) as _:
        for i in T.Parallel(64):
            T.atomic_add(H[0], X[i])
            T.atomic_add(H[0], X[i] * 2.0)  # interleaves with the line above per lane


@T.prim_func
def adds_under_a_serial_loop(X: T.Tensor((64,), "float32"), H: T.Tensor((2,), "float32")):
    with T.Kernel(1) as _:
        for i in T.Parallel(16):
            for t in T.serial(4):
                T.atomic_add(H[1], X[i * 4 + t])


@T.prim_func
def one_add_per_lane_and_buffer(X: T.Tensor((64,), "float32"), H: T.Tensor((2,), "float32"),
                                G: T.Tensor((1,), "float32")):
    with T.Kernel(1) as _:
        for i in T.Parallel(64):
            T.atomic_add(H[i % 2], X[i])
            T.atomic_add(G[0], X[i])  # another buffer: its order is the same either way


def test_atomic_adds_whose_lane_order_would_differ_are_refused_at_their_line():
    from tilepy.errors import LoweringError

    for k, line_text in ((two_adds_per_lane, "X[i] * 2.0"), (adds_under_a_serial_loop,
                                                             "X[i * 4 + t]")):
        with pytest.raises(LoweringError) as e:
            jit.source(k.func)
        msg = str(e.value)
        assert "test_atomics.py" in msg and line_text in msg, msg
        assert "statement by statement" in msg
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32) * 1e4
    a, b = both(one_add_per_lane_and_buffer.func,
                {"X": x, "H": np.zeros(2, np.float32), "G": np.ones(1, np.float32)}, {})
    for name in ("H", "G"):
        assert_same_bits(a[name], b[name], name)
