"""The CPU model of TileLang's warp-level MMA emitters (tilelang.intrinsics): each thread's
fragments after ldmatrix against a model of the PTX instruction, GEMMs against the model's
stated accumulation (exact bits) and float64, the JIT's bits, and the refused options."""

import inspect

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.compat.tilelang.intrinsics import mma_layout as L
from tilepy.compat.tilelang.intrinsics.mma_macro_generator import (
    INT4TensorCoreIntrinEmitter,
    TensorCoreIntrinEmitter,
    TensorCoreIntrinEmitterWithLadderTransform,
)
from tilepy.errors import NotPortableError, TileTypeError

F8 = ml_dtypes.float8_e4m3fn


def interp(kernel, *args):
    with tilepy.backend("interp"):
        return kernel(*args)


def emitter(dtype, accum, warps=(1, 1), tiles=(16, 16), chunk=32, cls=TensorCoreIntrinEmitter):
    return cls(a_dtype=dtype, b_dtype=dtype, accum_dtype=accum, a_transposed=False,
               b_transposed=True, block_row_warps=warps[0], block_col_warps=warps[1],
               warp_row_tiles=tiles[0], warp_col_tiles=tiles[1], chunk=chunk)


# ------------------------------------------------------------------ fragments


def ldmatrix_x4(tile, lane_address, bits):
    """PTX ldmatrix.sync.x4.b16 (no .trans) over a [rows, cols] tile: lane a // 8 * 8 + r
    gives the address (row, first column) of row r of 8 x 8 b16 matrix a // 8; register q of
    lane l then holds row l // 4 of matrix q, b16 words 2 * (l % 4) and + 1, i.e.
    32 // bits elements from column 4 * (l % 4) bytes on. Returns [32, 4 * 32 // bits]."""
    per_reg = 32 // bits
    out = np.empty((32, 4 * per_reg), tile.dtype)
    for lane in range(32):
        for q in range(4):
            row, col = lane_address(8 * q + lane // 4)
            start = col + per_reg * (lane % 4)
            out[lane, q * per_reg:(q + 1) * per_reg] = tile[row, start:start + per_reg]
    return out


def a_address(lane, bits):  # TileLang's ldmatrix offsets for A ([m, k], not transposed)
    return lane % 16, (128 // bits) * (lane // 16)


def b_address(lane, bits):  # ... and for B stored [n, k] (b_transposed)
    return 8 * (lane // 16) + lane % 8, (128 // bits) * (lane % 16 // 8)


@tilepy.jit(out_idx=[-2, -1])
def fragments(em):
    bm, bn = em.block_row_warps * em.warp_row_tiles, em.block_col_warps * em.warp_col_tiles
    dt, bk, na, nb = em.a_dtype, em.chunk, em.warp_rows * em.local_size_a, \
        em.warp_cols * em.local_size_b

    @T.prim_func
    def main(A: T.Tensor((bm, bk), dt), B: T.Tensor((bn, bk), dt),
             FA: T.Tensor((2, em.threads, na), dt), FB: T.Tensor((2, em.threads, nb), dt)):
        with T.Kernel(1, threads=em.threads):
            tx = T.get_thread_binding(0)
            a_s = T.alloc_shared((bm, bk), dt)
            b_s = T.alloc_shared((bn, bk), dt)
            a_l = T.alloc_local((na,), dt)
            b_l = T.alloc_local((nb,), dt)
            T.copy(A, a_s)
            T.copy(B, b_s)
            for ki in T.serial(2):
                em.ldmatrix_a(a_l, a_s, ki)
                em.ldmatrix_b(b_l, b_s, ki, thread_binding=tx)
                for v in T.serial(na):
                    FA[ki, tx, v] = a_l[v]
                for v in T.serial(nb):
                    FB[ki, tx, v] = b_l[v]
    return main


@pytest.mark.parametrize("dtype, accum, bits", [("float16", "float32", 16), ("int8", "int32", 8)])
def test_each_threads_fragments_after_ldmatrix_are_the_ptx_instructions_elements(dtype, accum,
                                                                                 bits):
    em = emitter(dtype, accum, warps=(2, 2), tiles=(32, 16), chunk=2 * 256 // bits)
    bm, bn, k = 64, 32, em.micro_size_k
    rng = np.random.default_rng(1)
    A = rng.integers(-100, 100, (bm, em.chunk)).astype(dtype)
    B = rng.integers(-100, 100, (bn, em.chunk)).astype(dtype)
    fa, fb = interp(fragments(em), A, B)
    for tx in range(em.threads):
        lane, warp = tx % 32, tx // 32
        warp_m, warp_n = warp % 2, warp // 2  # TileLang's order: m varies fastest
        for ki in range(2):
            for i in range(em.warp_rows):
                r0 = warp_m * 32 + 16 * i
                want = ldmatrix_x4(A[r0:r0 + 16, ki * k:(ki + 1) * k],
                                   lambda a: a_address(a, bits), bits)[lane]
                np.testing.assert_array_equal(fa[ki, tx, i * len(want):(i + 1) * len(want)],
                                              want)
            n0 = warp_n * 16
            want = ldmatrix_x4(B[n0:n0 + 16, ki * k:(ki + 1) * k],
                               lambda a: b_address(a, bits), bits)[lane]
            np.testing.assert_array_equal(fb[ki, tx], want)


@pytest.mark.parametrize("bits", [16, 8])
def test_the_layouts_inverses_and_the_accumulator_tile(bits):
    k = 256 // bits
    seen_a, seen_b = set(), set()
    for lane in range(32):
        for v in range(16 * k // 32):
            row, kk = L.a_element(lane, v, bits)
            assert L.a_owner(row, kk, bits) == (lane, v)
            n, kb = L.b_element(lane, v, bits)
            assert L.b_owner(n, kb, bits) == (lane, v)
            seen_a.add((row, kk))
            seen_b.add((n, kb))
    assert len(seen_a) == len(seen_b) == 16 * k  # every element once
    e = 32 // bits  # mma's reads, factorised as the emitter runs them, are the owners
    for lane in range(32):
        for v in range(8):
            row, col = L.c_element(lane, v)
            for kk in range(k):
                assert L.mma_sources(lane, v, kk // (4 * e), kk % (4 * e) // e, kk % e, bits) \
                    == (L.a_owner(row, kk, bits), L.b_owner(col, kk, bits))
    # mma.sync's accumulator: c0, c1 at row l // 4, columns 2 (l % 4) + 0, 1; c2, c3 eight
    # rows lower; slots 4..7 the second n8 instruction's (columns + 8)
    assert [L.c_element(5, v) for v in range(8)] == [
        (1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]


# ------------------------------------------------------------------ GEMMs


@tilepy.jit(out_idx=[-1])
def intrinsics_gemm(em, M, N, K, out_dtype, store_2d=False):
    bm, bn, bk = (em.block_row_warps * em.warp_row_tiles,
                  em.block_col_warps * em.warp_col_tiles, em.chunk)
    dt, mk = em.a_dtype, em.micro_size_k

    @T.prim_func
    def main(A: T.Tensor((M, K), dt), B: T.Tensor((N, K), dt), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=em.threads) as (bx, by):
            a_s = T.alloc_shared((bm, bk), dt)
            b_s = T.alloc_shared((bn, bk), dt)
            c_s = T.alloc_shared((bm, bn) if store_2d else (bm // 16, bn // 16, 16, 16),
                                 out_dtype)
            a_l = T.alloc_local((em.warp_rows * em.local_size_a,), dt)
            b_l = T.alloc_local((em.warp_cols * em.local_size_b,), dt)
            c_l = T.alloc_local((em.warp_rows * em.warp_cols * em.local_size_out,),
                                em.accum_dtype)
            T.clear(c_l)
            for ko in T.Pipelined(K // bk, num_stages=2):
                for i, k in T.Parallel(bm, bk):
                    a_s[i, k] = A[by * bm + i, ko * bk + k]
                for j, k in T.Parallel(bn, bk):
                    b_s[j, k] = B[bx * bn + j, ko * bk + k]
                for ki in T.serial(bk // mk):
                    em.ldmatrix_a(a_l, a_s, ki)
                    em.ldmatrix_b(b_l, b_s, ki)
                    em.mma(a_l, b_l, c_l)
            em.stmatrix(c_l, c_s)
            if store_2d:
                T.copy(c_s, C[by * bm, bx * bn])
            else:
                for i, j in T.Parallel(bm, bn):
                    C[by * bm + i, bx * bn + j] = c_s[i // 16, j // 16, i % 16, j % 16]
    return main


def stated_order(A, B, k_step, accum):
    """The model's numerics: per instruction of k_step, from C's value, k ascending, exact
    products summed in float32 (int64 here for integers), rounded once to `accum`."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    if accum == "int32":
        return (A.astype(np.int64) @ B.astype(np.int64).T).astype(np.int32)
    c = np.zeros((A.shape[0], B.shape[0]), accum)
    for k0 in range(0, A.shape[1], k_step):
        acc = c.astype(np.float32)
        for k in range(k0, k0 + k_step):
            acc = acc + np.outer(a[:, k], b[:, k]).astype(np.float32)  # exact products
        c = acc.astype(accum)
    return c


def test_intrinsics_gemm_follows_the_stated_order_within_bound_and_the_jit_gives_its_bits():
    em = emitter("float16", "float32", warps=(2, 1), tiles=(16, 16), chunk=32)
    M, N, K = 32, 32, 64
    rng = np.random.default_rng(2)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((N, K)).astype(np.float16)
    kernel = intrinsics_gemm(em, M, N, K, "float32")
    got = interp(kernel, A, B)
    np.testing.assert_array_equal(got, stated_order(A, B, 16, "float32"))
    exact = A.astype(np.float64) @ B.astype(np.float64).T
    bound = K * 2.0**-24 / (1 - K * 2.0**-24) * (np.abs(A.astype(np.float64))
                                                 @ np.abs(B.astype(np.float64)).T)
    assert np.all(np.abs(got - exact) <= bound)
    np.testing.assert_array_equal(kernel(A, B), got)  # the JIT's bits


@pytest.mark.parametrize("dtype, accum, make", [
    ("int8", "int32", lambda r, s: r.integers(-128, 128, s).astype(np.int8)),
    ("float8_e4m3fn", "float32", lambda r, s: r.standard_normal(s).astype(F8)),
    ("float16", "float16", lambda r, s: r.standard_normal(s).astype(np.float16)),
])
def test_8_bit_and_half_accumulator_instructions_on_the_interpreter(dtype, accum, make):
    em = emitter(dtype, accum, chunk=16 if dtype == "float16" else 32)
    M, N, K = 16, 32, 2 * em.chunk
    rng = np.random.default_rng(3)
    A, B = make(rng, (M, K)), make(rng, (N, K))
    got = interp(intrinsics_gemm(em, M, N, K, accum, store_2d=True), A, B)
    np.testing.assert_array_equal(got, stated_order(A, B, em.micro_size_k, accum))


def test_the_int4_emitter_multiplies_each_byte_as_two_signed_nibbles():
    em = emitter("int8", "int32", chunk=32, cls=INT4TensorCoreIntrinEmitter)
    rng = np.random.default_rng(4)
    A = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    B = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    got = interp(intrinsics_gemm(em, 16, 16, 32, "int32"), A, B)
    lo = lambda x: ((x.astype(np.int64) & 15) ^ 8) - 8  # noqa: E731
    hi = lambda x: x.astype(np.int64) >> 4  # noqa: E731
    want = lo(A) @ lo(B).T + hi(A) @ hi(B).T
    np.testing.assert_array_equal(got, want)
    small = np.abs(A) % 8, np.abs(B) % 8  # bytes 0..7: the int8 product
    got = interp(intrinsics_gemm(em, 16, 16, 32, "int32"), *small)
    np.testing.assert_array_equal(got, small[0].astype(np.int64) @ small[1].astype(np.int64).T)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("options, named", [
    ({"a_transposed": True}, "a_transposed"),
    ({"b_transposed": False}, "b_transposed"),
    ({"reduce_k": 2}, "reduce_k"),
    ({"a_dtype": "float32", "b_dtype": "float32"}, "a_dtype"),
    ({"accum_dtype": "float16", "a_dtype": "int8", "b_dtype": "int8"}, "accum_dtype"),
])
def test_an_option_the_model_lacks_is_a_clear_error_at_the_programs_line(options, named):
    kw = dict(a_dtype="float16", b_dtype="float16", accum_dtype="float32",
              a_transposed=False, b_transposed=True)
    kw.update(options)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(NotPortableError) as err:
        TensorCoreIntrinEmitter(**kw)
    text = str(err.value)
    assert named in text and "got" in text and "T.gemm" in text
    assert f"test_tilelang_mma.py:{line}" in text
    with pytest.raises(NotPortableError, match="transform_kind"):
        TensorCoreIntrinEmitterWithLadderTransform(b_transposed=True, warp_row_tiles=16,
                                                   warp_col_tiles=16, transform_kind_b=2)



def test_warp_tiles_that_are_not_whole_mma_tiles_are_a_type_error_at_the_programs_line():
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(TileTypeError) as err:
        TensorCoreIntrinEmitter(b_transposed=True, warp_row_tiles=24, warp_col_tiles=16)
    assert "24 x 16" in str(err.value) and f"test_tilelang_mma.py:{line}" in str(err.value)

@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype, accum, cls", [
    ("int8", "int32", TensorCoreIntrinEmitter),
    ("float8_e4m3fn", "float32", TensorCoreIntrinEmitter),
    ("float16", "float16", TensorCoreIntrinEmitter),
    ("int8", "int32", INT4TensorCoreIntrinEmitter),
])
def test_the_jit_gives_the_interpreters_bits_on_four_warps(dtype, accum, cls):
    em = emitter(dtype, accum, warps=(2, 2), tiles=(32, 16), chunk=32, cls=cls)
    M, N, K = 64, 64, 64
    rng = np.random.default_rng(5)
    if dtype == "int8":
        A, B = (rng.integers(-128, 128, s).astype(np.int8) for s in ((M, K), (N, K)))
    else:
        dt = F8 if dtype.startswith("float8") else np.float16
        A, B = (rng.standard_normal(s).astype(dt) for s in ((M, K), (N, K)))
    kernel = intrinsics_gemm(em, M, N, K, accum)
    want = interp(kernel, A, B)
    if cls is TensorCoreIntrinEmitter:
        np.testing.assert_array_equal(want, stated_order(A, B, em.micro_size_k, accum))
    np.testing.assert_array_equal(kernel(A, B), want)


def test_fragments_outside_per_thread_local_memory_are_refused_at_the_call():
    em = emitter("float16", "float32")
    with pytest.raises(TileTypeError, match="expected a 1-d T.alloc_local buffer") as err:
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32):
                a_s = T.alloc_shared((16, 16), "float16")
                a_l = T.alloc_local((8,), "float16")
                c_l = T.alloc_fragment((8,), "float32")  # per block, not per thread
                T.copy(A, a_s)
                em.ldmatrix_a(a_l, a_s, 0)
                em.mma(a_l, a_l, c_l)
    assert "em.mma(a_l, a_l, c_l)" in str(err.value)
