"""TileLang's safe-memory-access rule on the JIT: global element loads outside give the
safe value and stores outside are skipped, bit for bit as in the interpreter, for plain
and narrow dtypes; the versioned in-range copy carries no check."""

import functools

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_same_bits, both

cached = functools.lru_cache(maxsize=None)


@cached
def gather(dtype, safe):
    @T.prim_func
    def gather(X: T.Tensor((T.symbolic("n"),), dtype), P: T.Tensor((16,), "int32"),
               Y: T.Tensor((16,), "float32"), Z: T.Tensor((16,), "float32")):
        with T.Kernel(2) as bx:
            T.annotate_safe_value({X: safe})
            for i in T.Parallel(8):
                Y[bx * 8 + i] = T.cast(X[P[bx * 8 + i]], "float32") + 1.0
                Z[P[bx * 8 + i]] = -2.0  # outside Z: skipped

    return gather


@pytest.mark.parametrize("dtype, safe, want", [
    ("float32", -0.1, np.float32(-0.1) + 1), ("bfloat16", 1e-3, 1 + float(
        np.asarray(1e-3).astype(ml_dtypes.bfloat16))), ("int8", 300, 1 + 44)])
def test_safe_values_and_skipped_stores_equal_the_interpreter(dtype, safe, want):
    func = gather(dtype, safe).func
    p = np.array([0, 3, -1, 20, 7, 16, 2, 5, 9, 1, -8, 4, 6, 30, 8, 11], np.int32)
    x = (np.arange(10) + 1).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    arrays = dict(X=x, P=p, Y=np.zeros(16, np.float32), Z=np.zeros(16, np.float32))
    for tier in ("py", "numba") if dtype == "bfloat16" else ("py",):
        a, b = both(func, arrays, {"n": 10}, tier=tier)
        assert_same_bits(a["Y"], b["Y"], f"{dtype} {tier}")
        assert_same_bits(a["Z"], b["Z"], f"{dtype} {tier}")
    y = a["Y"]
    outside = (p < 0) | (p >= 10)
    assert np.float32(y[2]) == np.float32(want) and outside.sum() == 6
    inside = p[(p >= 0) & (p < 16)]
    assert (a["Z"][inside] == -2).all() and (a["Z"] == -2).sum() == len(inside) == 11


@cached
def rows():
    @T.prim_func
    def rows(X: T.Tensor((T.symbolic("n"),), "float32"),
             Y: T.Tensor((T.symbolic("n"),), "float32")):
        with T.Kernel(T.ceildiv(T.symbolic("n"), 32)) as bx:
            for i in T.Parallel(32):
                Y[bx * 32 + i] = X[bx * 32 + i] * 3.0  # no edge guard: the rule masks it

    return rows


def test_the_in_range_copy_stays_unchecked_and_ragged_sizes_run():
    src = jit.source(rows().func)
    fast, slow = src.split("the versioning pass's version")[1].split(
        "else:", 1)
    assert "_ld1" not in fast and "_in1" not in fast  # unchecked, vectorisable
    assert "_ld1(X" in slow and "_in1(Y" in slow and "_gld" not in src
    for n in (64, 70, 5):
        a, b = both(rows().func, dict(X=np.arange(n, dtype=np.float32),
                                      Y=np.zeros(n, np.float32)), {"n": n}, tier="py")
        assert_same_bits(a["Y"], b["Y"], f"n={n}")
        assert (a["Y"] == np.arange(n) * 3).all()


@cached
def rank5():
    @T.prim_func
    def rank5(X: T.Tensor((2, 2, 3, 2, 4), "float32"), Y: T.Tensor((2, 2, 3, 2, 4), "float32")):
        with T.Kernel(2) as b:
            for i, j, k, l in T.Parallel(2, 3, 2, 4):
                Y[b, i, j, k, l] = X[b, i, j + 1, k, l] + 1.0  # j + 1 = 3 is outside

    return rank5


def test_rank5_global_element_accesses_run_masked_and_strict_mode_says_its_limit():
    x = np.arange(96, dtype=np.float32).reshape(2, 2, 3, 2, 4)
    a, b = both(rank5().func, dict(X=x, Y=np.zeros_like(x)), {})
    assert_same_bits(a["Y"], b["Y"], "Y")
    assert (a["Y"][:, :, :2] == x[:, :, 1:] + 1).all() and (a["Y"][:, :, 2] == 1).all()
    with pytest.raises(tilepy.TilepyError, match="strict mode checks global element "
                       "accesses of rank 1..4"):
        jit.run(rank5().func, dict(X=x, Y=np.zeros_like(x)), {}, tier="py", strict=True)
