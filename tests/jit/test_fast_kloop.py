"""Fast mode's whole-launch product (jit/kloop.py, jit/fast.py): a launch whose blocks
clear, run a k loop of tile copies and a gemm, and copy out is one BLAS call. Checked
against the interpreter with the derived bound 2 gamma_{K+1} sum|a||b| (each side within
gamma_{K+1} of the exact product), on edge tiles (M, N, K not multiples of the tiles),
every transpose, and the kernels the matchers must refuse (they keep the per-tile path)."""

import numpy as np
import pytest

import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_same_bits
from tilepy.interpreter import run as interp_run
from tilepy.ir.stmt import For, Launch, walk
from tilepy.jit.kloop import match_kloop, match_launch
from tilepy.kernels import gemm, gemm_split_k

U = {"float32": 2.0**-24, "float64": 2.0**-53}
ONE_PRODUCT = "this launch is one matrix product"


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def _ops(a, b, ta, tb):
    A = a.T.astype(np.float64) if ta else a.astype(np.float64)
    B = b.T.astype(np.float64) if tb else b.astype(np.float64)
    return A, B


def _inputs(rng, M, N, K, ta, tb, dt):
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dt)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dt)
    return a, b


def _within(got, want, A, B, dt, relu=False):
    K = A.shape[1]
    bound = 2 * gamma(K + 1, U[dt]) * (np.abs(A) @ np.abs(B))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(err <= bound), float((err / np.maximum(bound, 1e-300)).max())
    ref = A @ B
    if relu:
        ref = np.maximum(ref, 0)
    # and it is the product (not zeros that a wrong clip would leave)
    assert np.all(np.abs(got - ref) <= 2 * bound + 1e-300)


SHAPES = [(45, 70, 37), (64, 64, 64), (1, 1, 1), (33, 17, 0), (70, 3, 100)]


@pytest.mark.parametrize("dt,ta,tb", [("float32", False, False), ("float32", True, False),
                                       ("float64", False, True), ("float32", True, True)])
@pytest.mark.parametrize("tier", ["numba", "py"])
def test_library_gemm_launch_is_one_product(dt, ta, tb, tier):
    func = gemm(32, 32, 16, dt, dt, dt, ta, tb).func
    k = jit.compile(func, fast=True, tier=tier)
    assert ONE_PRODUCT in k.source and "prange(" not in k.source
    assert ONE_PRODUCT not in jit.compile(func, tier="py").source  # exact mode: untouched
    rng = np.random.default_rng(5)
    for M, N, K in SHAPES:
        a, b = _inputs(rng, M, N, K, ta, tb, dt)
        want, got = np.zeros((M, N), dt), np.full((M, N), np.nan, dt)
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, {"A": a, "B": b, "C": want}, sizes)
        k({"A": a, "B": b, "C": got}, sizes)
        _within(got, want, *_ops(a, b, ta, tb), dt)


@pytest.mark.parametrize("dt,ta,tb,tier", [
    ("float8_e4m3fn", False, False, "numba"), ("float8_e4m3fn", True, True, "py"),
    ("float8_e5m2", False, True, "py"), ("float4_e2m1fn", True, False, "py"),
    ("bfloat16", True, False, "py"), ("float16", False, True, "py")])
def test_narrow_library_gemm_launch_decodes_then_is_one_product(dt, ta, tb, tier):
    """bf16/fp16/fp8/fp4 operands are decoded to float32 (exact) once, then one BLAS call: within
    the same bound of the interpreter (products of narrow values are exact in float32)."""
    import ml_dtypes

    func = gemm(32, 32, 16, dt, "float32", "float32", ta, tb).func
    k = jit.compile(func, fast=True, tier=tier)
    assert ONE_PRODUCT in k.source and f"_dec_{dt}(" in k.source
    rng = np.random.default_rng(8)
    for M, N, K in SHAPES:
        a, b = _inputs(rng, M, N, K, ta, tb, getattr(ml_dtypes, dt, np.dtype(dt)))
        want, got = np.zeros((M, N), np.float32), np.full((M, N), np.nan, np.float32)
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, {"A": a, "B": b, "C": want}, sizes)
        k({"A": a, "B": b, "C": got}, sizes)
        _within(got, want, *_ops(a, b, ta, tb), "float32")


def test_both_narrow_operands_are_decoded_in_one_parallel_loop():
    """Two narrow operands share one parallel decode loop (one start of the thread pool per
    call, not two); the values are checked by the test above."""
    src = jit.compile(gemm(32, 32, 16, "bfloat16", "float32", "float32").func, fast=True,
                      tier="py").source
    assert src.count("in prange(") == 1 and src.count("_dec_bfloat16(") == 2


def epilogue_gemm(bm, bn, bk, ta, tb, dt="float32", scale_tile=False):
    """gemm + relu before the copy out (so the launch is not a bare product) that also
    writes the A tile the k loop left (`Last`), which the fused loop must reproduce;
    `scale_tile` doubles the A tile in the loop (the loop is then not a bare product)."""
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
    a_shape, a_tile = ((K, M), (bk, bm)) if ta else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if tb else ((K, N), (bk, bn))
    last_shape = (bk, M) if ta else (M, bk)
    t0, t1 = a_tile

    @T.prim_func
    def epi(A: T.Tensor(a_shape, dt), B: T.Tensor(b_shape, dt), C: T.Tensor((M, N), dt),
            Last: T.Tensor(last_shape, dt)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            a_s = T.alloc_shared(a_tile, dt)
            b_s = T.alloc_shared(b_tile, dt)
            c_l = T.alloc_fragment((bm, bn), dt)
            T.clear(c_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if ta:
                    T.copy(A[k * bk, by * bm], a_s)
                else:
                    T.copy(A[by * bm, k * bk], a_s)
                if tb:
                    T.copy(B[bx * bn, k * bk], b_s)
                else:
                    T.copy(B[k * bk, bx * bn], b_s)
                if scale_tile:
                    for i, j in T.Parallel(t0, t1):
                        a_s[i, j] = a_s[i, j] * 2.0
                T.gemm(a_s, b_s, c_l, transpose_A=ta, transpose_B=tb)
            for i, j in T.Parallel(bm, bn):
                c_l[i, j] = T.max(c_l[i, j], 0.0)
            T.copy(c_l, C[by * bm, bx * bn])
            if bx == 0:  # one writer per Last row (the interpreter checks for races)
                if ta:
                    T.copy(a_s, Last[0, by * bm])
                else:
                    T.copy(a_s, Last[by * bm, 0])

    return epi.func


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_a_launch_with_an_epilogue_keeps_its_blocks(ta, tb):
    """The k loop is a product but the launch is not (relu, a second output): per-tile
    BLAS inside the blocks, C within the bound, the A tile the loop left bit for bit."""
    func = epilogue_gemm(32, 16, 8, ta, tb)
    assert match_kloop(_loop(func)) is not None and match_launch(_launch(func)) is None
    k = jit.compile(func, fast=True)
    assert ONE_PRODUCT not in k.source and "prange(" in k.source and "_gemm_acc(" in k.source
    rng = np.random.default_rng(7)
    for M, N, K in [(45, 70, 37), (64, 32, 8), (5, 3, 1)]:
        a, b = _inputs(rng, M, N, K, ta, tb, "float32")
        ls = (8, M) if ta else (M, 8)
        want = {"A": a, "B": b, "C": np.zeros((M, N), np.float32),
                "Last": np.zeros(ls, np.float32)}
        got = {"A": a, "B": b, "C": np.full((M, N), np.nan, np.float32),
               "Last": np.full(ls, np.nan, np.float32)}
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, want, sizes)
        k(got, sizes)
        _within(got["C"], want["C"], *_ops(a, b, ta, tb), "float32", relu=True)
        assert_same_bits(want["Last"], got["Last"], "the A tile the last k step left")


def test_a_loop_that_changes_its_tiles_keeps_the_per_tile_path():
    func = epilogue_gemm(32, 16, 8, False, False, scale_tile=True)
    assert match_kloop(_loop(func)) is None
    k = jit.compile(func, fast=True)
    assert ONE_PRODUCT not in k.source and "_gemm_acc(" in k.source  # per-tile BLAS
    rng = np.random.default_rng(8)
    M, N, K = 45, 70, 37
    a, b = _inputs(rng, M, N, K, False, False, "float32")
    want = {"A": a, "B": b, "C": np.zeros((M, N), np.float32),
            "Last": np.zeros((M, 8), np.float32)}
    got = {k_: v.copy() for k_, v in want.items()}
    interp_run(func, want, {"M": M, "N": N, "K": K})
    k(got, {"M": M, "N": N, "K": K})
    _within(got["C"], want["C"], 2 * a.astype(np.float64), b.astype(np.float64), "float32",
            relu=True)
    assert_same_bits(want["Last"], got["Last"])


def test_split_k_is_not_one_product():
    """K offset (bz * per + ko) * block_K: the k loop is a product (the offset may depend
    on a block id), the launch (atomic adds of K slices) is not; per-tile BLAS, and the
    per-split sums are added in block order as before."""
    func = gemm_split_k(16, 32, 8, 3).func
    assert match_launch(_launch(func)) is None and match_kloop(_loop(func)) is not None
    k = jit.compile(func, fast=True)
    assert ONE_PRODUCT not in k.source and "_gemm_acc(" in k.source
    rng = np.random.default_rng(9)
    M, N, K = 37, 45, 90  # every slice starts inside K (the interpreter checks)
    a, b = _inputs(rng, M, N, K, False, False, "float32")
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    want, got = c0.copy(), c0.copy()
    interp_run(func, {"A": a, "B": b, "C": want}, {"M": M, "N": N, "K": K})
    k({"A": a, "B": b, "C": got}, {"M": M, "N": N, "K": K})
    A, B = _ops(a, b, False, False)
    bound = 2 * gamma(K + 4, U["float32"]) * (np.abs(A) @ np.abs(B) + np.abs(c0))
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


# ------------------------------------------------------------------ what the matchers refuse


def _launch(func) -> Launch:
    return next(s for s in walk(func.body) if isinstance(s, Launch))


def _loop(func) -> For:
    return next(s for s in walk(func.body) if isinstance(s, For) and s.kind.value ==
                "pipelined")


def _variant(change=""):
    """The library gemm with one thing changed (build-time branches); each change but ""
    must make a matcher refuse."""
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
    in_dt = "float64" if change == "dtype" else "float32"

    @T.prim_func
    def v(A: T.Tensor((M, K), in_dt), B: T.Tensor((K, N), in_dt),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32)) as (bx, by):
            a_s = T.alloc_shared((32, 16), in_dt)
            b_s = T.alloc_shared((16, 32), in_dt)
            c_l = T.alloc_fragment((32, 32), "float32")
            T.clear(c_l)
            for k in T.Pipelined(T.ceildiv(K, 16)):
                if change == "repeat":
                    T.copy(A[by * 32, (k // 2) * 16], a_s)
                elif change == "gaps":
                    T.copy(A[by * 32, (2 * k) * 16], a_s)
                elif change == "rows move":
                    T.copy(A[(by + k) * 32, k * 16], a_s)
                elif change == "one id":
                    T.copy(A[bx * 32, k * 16], a_s)
                elif change == "rows reversed":
                    T.copy(A[(T.ceildiv(M, 32) - 1 - by) * 32, k * 16], a_s)
                else:
                    T.copy(A[by * 32, k * 16], a_s)
                T.copy(B[k * 16, bx * 32], b_s)
                if change == "clear":
                    T.gemm(a_s, b_s, c_l, clear_accum=True)
                else:
                    T.gemm(a_s, b_s, c_l)
            if change == "one id":
                T.copy(c_l, C[bx * 32, bx * 32])
            else:
                T.copy(c_l, C[by * 32, bx * 32])

    return v.func


def test_the_plain_variant_matches_both():
    f = _variant()
    assert match_kloop(_loop(f)) is not None and match_launch(_launch(f)) is not None


@pytest.mark.parametrize("change", ["repeat", "gaps", "rows move", "clear", "dtype"])
def test_k_loops_the_pass_cannot_prove_are_refused(change):
    """K slices that repeat or leave gaps, rows that move with k, clear_accum (only the
    last step counts), tiles of another dtype than the accumulator (but for narrow floats
    into float32, which test_narrow_library_gemm_launch_decodes_then_is_one_product runs)."""
    f = _variant(change)
    assert match_kloop(_loop(f)) is None
    assert match_launch(_launch(f)) is None


@pytest.mark.parametrize("change", ["rows reversed", "one id"])
def test_launches_the_pass_cannot_prove_are_refused(change):
    """C rows that are not A's rows; one block id picking both rows and columns."""
    f = _variant(change)
    assert match_kloop(_loop(f)) is not None
    assert match_launch(_launch(f)) is None


def test_refused_launch_keeps_the_per_block_loop_and_its_results():
    """Block by writes C's tile row by with A's tile row (last - by): not one product, so
    the blocks run as before (per-tile BLAS) and agree with the interpreter."""
    f = _variant("rows reversed")
    k = jit.compile(f, fast=True)
    assert ONE_PRODUCT not in k.source and "prange(" in k.source
    rng = np.random.default_rng(3)
    M, N, K = 64, 45, 37
    a, b = _inputs(rng, M, N, K, False, False, "float32")
    want, got = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    interp_run(f, {"A": a, "B": b, "C": want}, {"M": M, "N": N, "K": K})
    k({"A": a, "B": b, "C": got}, {"M": M, "N": N, "K": K})
    swapped = np.concatenate([a[32:], a[:32]])
    _within(got, want, *_ops(swapped, b, False, False), "float32")


def test_blas_runs_single_threaded_inside_blocks_and_the_count_is_restored():
    """Per-tile calls run with scipy's OpenBLAS at one thread (each block already has a
    CPU); form 1 keeps BLAS's threads. This environment installs scipy's wheel, so the
    library must be found."""
    from tilepy.jit import blas

    found = blas._openblas()
    assert found is not None
    get, put = found
    before = get()
    with blas.one_thread():
        assert get() == 1
    assert get() == before
    per_tile = jit.compile(epilogue_gemm(32, 16, 8, False, False), fast=True)
    whole = jit.compile(gemm(32, 32, 16, "float32", "float32", "float32").func, fast=True)
    assert per_tile.blas_in_blocks and whole.blas_in_blocks  # panels: Numba's threads
    assert "_gemm_par(" in whole.source and "_gemm_par(" not in per_tile.source


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_a_product_cut_into_panels_over_numbas_threads_is_the_product(ta, tb):
    """blas.numba_gemm_par on two threads: C's longer side in panels (rows when M >= N,
    else columns; edge panels not multiples of blas.PANEL), each a BLAS call on its views
    (A's or B's transposed storage cut along the right axis), beta 0 and 1."""
    import numba

    from tilepy.jit import blas

    par = blas.numba_gemm_par()
    rng = np.random.default_rng(7)
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        for M, N, K in [(70, 9, 13), (9, 70, 13), (33, 33, 5), (1, 40, 3)]:
            a, b = _inputs(rng, M, N, K, ta, tb, "float32")
            c0 = rng.standard_normal((M, N)).astype(np.float32)
            A, B = _ops(a, b, ta, tb)
            for beta in (0.0, 1.0):
                c = c0.copy()
                with blas.one_thread():
                    par(a, b, c, ta, tb, beta)
                want = A @ B + beta * c0.astype(np.float64)
                bound = 2 * gamma(K + 2, U["float32"]) * (np.abs(A) @ np.abs(B)
                                                          + beta * np.abs(c0))
                assert np.all(np.abs(c - want) <= bound), (M, N, K, beta)
    finally:
        numba.set_num_threads(before)
