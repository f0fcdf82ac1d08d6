"""Loop versioning of global bounds checks (jit/passes/versioning.py): a T.Parallel nest whose
global indices can be bounded runs unchecked when the bounds lie inside the arrays, and
checked (strict mode) or masked (the default, TileLang's rule) otherwise; either way the
bits equal the interpreter's, and in strict mode every out-of-range access raises as the
interpreter does."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_same_bits, both
from tilepy.errors import OutOfBoundsError
from tilepy.interpreter import run as interp_run
from tilepy.jit.faults import CompiledBoundsError

cached = functools.lru_cache(maxsize=None)
_MARK = "the versioning pass's version (jit/passes/versioning.py)"  # the unchecked copy's comment


def _nests(src: str) -> tuple[str, str]:
    """The unchecked and the checked copy of the (only) versioned nest in `src`."""
    head, rest = src.split(_MARK, 1)
    fast, slow = rest.split("\n    else:\n", 1)
    return fast, slow.split("\n\n")[0]


@cached
def bias_rows():
    @T.prim_func
    def bias_rows(X: T.Tensor((T.symbolic("m"), T.symbolic("n")), "float32"),
                  B: T.Tensor((T.symbolic("n"),), "float32"),
                  P: T.Tensor((8,), "int32"),
                  Z: T.Tensor((T.symbolic("m"), T.symbolic("n")), "float32")):
        with T.Kernel(T.ceildiv(T.symbolic("n"), 16), T.ceildiv(T.symbolic("m"), 8)) as (
                bx, by):
            for i, j in T.Parallel(8, 16):
                r = by * 8 + i
                if r < Z.shape[0] and bx * 16 + j < Z.shape[1]:  # ragged edges
                    Z[r, bx * 16 + j] = X[r, bx * 16 + j] * 2.0 + B[bx * 16 + j] + X[
                        P[i], bx * 16 + j]  # P[i]: data, checked in both copies

    return bias_rows


def _arrays(m, n, p=None):
    rng = np.random.default_rng(m * 100 + n)
    return dict(X=rng.standard_normal((m, n)).astype(np.float32),
                B=rng.standard_normal(n).astype(np.float32),
                P=np.arange(8, dtype=np.int32) % m if p is None else p,
                Z=np.zeros((m, n), np.float32))


def test_bounded_accesses_are_unchecked_in_one_copy_and_data_dependent_ones_never():
    src = jit.source(bias_rows().func, strict=True)
    fast, slow = _nests(src)
    # the unchecked copy checks only X[P[i], ...], whose row is data; P[i] is bounded
    assert fast.count("_gld") == 1 and "_gld2(_flt6, _blk3, 0, X, P[np.uint64(i)], " in fast
    assert fast.count("_gin") == 0 and "Z[" in fast
    assert slow.count("_gld") == 4 and slow.count("_gin") == 1  # every access


@pytest.mark.parametrize("m, n", [(8, 16), (24, 48), (13, 37), (1, 5)])
def test_values_equal_the_interpreter_on_full_and_ragged_shapes(m, n):
    a, b = both(bias_rows().func, _arrays(m, n), {"m": m, "n": n})
    assert_same_bits(a["Z"], b["Z"], f"Z {m}x{n}")


def test_a_data_index_outside_raises_from_the_unchecked_copy_too():
    m, n = 16, 32
    p = np.arange(8, dtype=np.int32)
    p[3] = m  # X[16, ...]: the block's bounded accesses are in range, this one is not
    arrays = _arrays(m, n, p)
    with pytest.raises(OutOfBoundsError) as want:
        interp_run(bias_rows().func, {k: v.copy() for k, v in arrays.items()}, {"m": m, "n": n},
                   strict=True)
    with pytest.raises(CompiledBoundsError) as got:
        jit.run(bias_rows().func, {k: v.copy() for k, v in arrays.items()}, {"m": m, "n": n},
                strict=True)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


@cached
def shifted():
    @T.prim_func
    def shifted(X: T.Tensor((T.symbolic("n"),), "float32"),
                Y: T.Tensor((T.symbolic("n"),), "float32"), S: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(T.symbolic("n"), 32)) as bx:
            s = S[0]
            for i in T.Parallel(32):
                Y[bx * 32 + i] = X[bx * 32 + i + s]  # s = 1 reads past X in the last block

    return shifted


def test_an_affine_index_outside_takes_the_checked_copy_and_raises():
    n = 96
    x = np.arange(n, dtype=np.float32)
    a, b = both(shifted().func, dict(X=x, Y=np.zeros(n, np.float32),
                                     S=np.array([0], np.int32)), {"n": n})
    assert_same_bits(a["Y"], b["Y"], "Y, s = 0")
    arrays = dict(X=x, Y=np.zeros(n, np.float32), S=np.array([1], np.int32))
    with pytest.raises(OutOfBoundsError) as want:
        interp_run(shifted().func, {k: v.copy() for k, v in arrays.items()}, {"n": n},
                   strict=True)
    for tier in ("numba", "py"):
        with pytest.raises(CompiledBoundsError) as got:
            jit.run(shifted().func, {k: v.copy() for k, v in arrays.items()}, {"n": n},
                    tier=tier, strict=True)
        assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
        assert "block 2: out-of-bounds read of X[96]" in str(got.value)


@cached
def narrow_index():
    @T.prim_func
    def narrow_index(X: T.Tensor((256,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(2) as bx:
            for i in T.Parallel(32):
                Y[bx * 32 + i] = X[T.cast(bx * 32 + i + 100, "int8")]  # wraps past 127

    return narrow_index


def test_an_index_that_wraps_in_its_dtype_is_never_unchecked():
    # in int64 the indices are 100..163, inside X; as int8 they wrap to -128..-93, which
    # an unchecked load would read from X's end. The nest's test sees the int8 range.
    func = narrow_index().func
    src = jit.source(func, strict=True)
    assert "<= 127)" in src.split(_MARK)[0]  # the int8 range, in the nest's test
    x = np.arange(256, dtype=np.float32)
    with pytest.raises(OutOfBoundsError) as want:
        interp_run(func, dict(X=x, Y=np.zeros(64, np.float32)), {}, strict=True)
    with pytest.raises(CompiledBoundsError) as got:
        jit.run(func, dict(X=x, Y=np.zeros(64, np.float32)), {}, strict=True)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
    assert "X[-128]" in str(got.value)


@cached
def guarded_shift():
    @T.prim_func
    def guarded_shift(X: T.Tensor((T.symbolic("n"),), "float32"),
                      Y: T.Tensor((T.symbolic("m"),), "float32")):
        with T.Kernel(T.ceildiv(T.symbolic("m"), 32)) as bx:
            for i in T.Parallel(32):
                g = bx * 32 + i - 3
                if g >= 0 and g < X.shape[0]:
                    Y[bx * 32 + i] = X[g]
                else:
                    Y[bx * 32 + i] = X[i % 5] * -1.0

    return guarded_shift


@pytest.mark.parametrize("n, m", [(64, 64), (40, 64), (100, 96)])
def test_an_if_on_the_index_bounds_the_access_under_it(n, m):
    src = jit.source(guarded_shift().func, strict=True)
    fast, slow = _nests(src)
    # X[g] is inside X wherever the `if` lets it run; X[i % 5] lies in [0, 4]
    assert "_gld" not in fast and "_gin" not in fast
    assert slow.count("_gld") == 2 and slow.count("_gin") == 2
    assert "(4 < np.int64(n))" in src  # X[i % 5] needs 5 elements
    x = np.arange(n, dtype=np.float32)
    a, b = both(guarded_shift().func, dict(X=x, Y=np.zeros(m, np.float32)), {"n": n, "m": m})
    assert_same_bits(a["Y"], b["Y"], f"Y n={n} m={m}")


def test_an_if_bounded_access_with_too_small_an_array_still_raises():
    # n = 3: X[i % 5] reads X[3] (i = 8) outside X; the nest's test sends every block to
    # the checked copy, which reports the interpreter's first fault
    arrays = dict(X=np.arange(3, dtype=np.float32), Y=np.zeros(64, np.float32))
    with pytest.raises(OutOfBoundsError) as want:
        interp_run(guarded_shift().func, {k: v.copy() for k, v in arrays.items()},
                   {"n": 3, "m": 64}, strict=True)
    with pytest.raises(CompiledBoundsError) as got:
        jit.run(guarded_shift().func, {k: v.copy() for k, v in arrays.items()},
                {"n": 3, "m": 64}, strict=True)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


# ---------------------------------------------------------------- property: any offset

STRIDES = (1, -1, 2)


@cached
def strided(k: int, guarded: bool):
    """Y[bx * 16 + i] = X[i * k + off] (off read from O before the nest), optionally under
    an `if` on the X index: one program per (k, guarded), data varies."""

    @T.prim_func
    def strided(X: T.Tensor((T.symbolic("n"),), "float32"), O: T.Tensor((1,), "int32"),
                Y: T.Tensor((T.symbolic("m"),), "float32")):
        with T.Kernel(T.ceildiv(T.symbolic("m"), 16)) as bx:
            off = O[0] + bx
            for i in T.Parallel(16):
                g = i * k + off
                if guarded:
                    if g >= 0 and g < X.shape[0]:
                        Y[bx * 16 + i] = X[g]
                else:
                    Y[bx * 16 + i] = X[g] + 1.0

    return strided


@given(k=st.sampled_from(STRIDES), guarded=st.booleans(), n=st.integers(1, 70),
       blocks=st.integers(1, 4), off=st.integers(-40, 80))
@settings(max_examples=60, deadline=None)
def test_any_offset_gives_the_interpreters_bits_or_its_error(k, guarded, n, blocks, off):
    """Whatever the offset, the JIT (versioned nest) equals the interpreter: the same bits
    when every access is in range, else the same first fault."""
    func = strided(k, guarded).func
    m = blocks * 16
    arrays = dict(X=np.arange(n, dtype=np.float32) * 0.5, O=np.array([off], np.int32),
                  Y=np.full(m, -7.0, np.float32))
    a = {key: v.copy() for key, v in arrays.items()}
    b = {key: v.copy() for key, v in arrays.items()}
    try:
        interp_run(func, a, {"n": n, "m": m}, strict=True)
    except OutOfBoundsError as want:
        with pytest.raises(CompiledBoundsError) as got:
            jit.run(func, b, {"n": n, "m": m}, strict=True)
        assert str(got.value).splitlines()[0] == str(want).splitlines()[0]
    else:
        jit.run(func, b, {"n": n, "m": m}, strict=True)
        assert_same_bits(a["Y"], b["Y"], f"k={k} guarded={guarded} n={n} off={off}")
    # by default (TileLang's rule) every offset runs, with the interpreter's bits (the py
    # tier runs the same generated source as Numba, without a second compile per program)
    a, b = both(func, arrays, {"n": n, "m": m}, tier="py")
    assert_same_bits(a["Y"], b["Y"], f"masked: k={k} guarded={guarded} n={n} off={off}")


# ---------------------------------------------------------------- indices read from arrays


@cached
def table_gather():
    @T.prim_func
    def table_gather(X: T.Tensor((T.symbolic("n"),), "float32"), P: T.Tensor((32,), "int32"),
                     Y: T.Tensor((32,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(32):
                g = P[i]  # data: only the `if` below bounds it
                if g >= 0 and g < X.shape[0]:
                    Y[i] = X[g] + T.cast(bx, "float32")
                else:
                    Y[i] = -1.0

    return table_gather


def test_an_index_read_from_an_array_is_bounded_by_the_if_on_it():
    """A variable bound to a load has no range of its own; comparisons of it on both sides
    in an enclosing `if` bound it (its one binding holds wherever it is read), and the pair
    `g >= 0 and g < n` is emitted as one unsigned test. Indices outside either side take
    the else branch, with the interpreter's bits."""
    src = jit.source(table_gather().func, strict=True)
    fast, slow = _nests(src)
    assert "_gld" not in fast and "X[np.uint64(g)]" in fast
    assert slow.count("_gld") == 2 and "_below(g, n)" in fast  # P[i] and X[g]
    p = np.array([0, 5, -1, 6, 7, 100, -2**31, 2**31 - 1] * 4, np.int32)
    for n in (6, 8, 200):
        arrays = dict(X=np.arange(n, dtype=np.float32), P=p, Y=np.zeros(32, np.float32))
        a, b = both(table_gather().func, arrays, {"n": n})
        assert_same_bits(a["Y"], b["Y"], f"n={n}")
        assert list(b["Y"][:8]) == [0.0, 5.0 if n > 5 else -1.0, -1.0] + \
            [float(v) if v < n else -1.0 for v in (6, 7, 100)] + [-1.0, -1.0]


def test_below_is_the_pair_of_comparisons_in_both_tiers():
    from tilepy.jit.runtime import _below, _numba_helpers

    compiled = _numba_helpers()["_below"]
    for dt in (np.int32, np.int64):
        info = np.iinfo(dt)
        vals = [info.min, info.min + 1, -5, -1, 0, 1, 5, info.max - 1, info.max]
        for a in vals:
            for b in vals:
                want = 0 <= a < b
                assert _below(dt(a), dt(b)) == want, (dt, a, b)
                assert compiled(dt(a), dt(b)) == want, (dt, a, b)
