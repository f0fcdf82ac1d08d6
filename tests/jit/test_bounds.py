"""Bounds checks in the JIT: an out-of-range index of a shared / fragment / local buffer,
or (strict mode) an element load, store or atomic add outside a global array, raises as the
interpreter does (block, buffer, index, shape, the user's line, the hint), in both tiers;
by default global element accesses outside give the safe value / are skipped, bit for bit
as in the interpreter; local accesses the analysis proves in range carry no check; global
edge tiles of tile ops are clipped."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_same_bits, both
from tilepy.errors import OutOfBoundsError, TilepyError
from tilepy.interpreter import run as interp_run
from tilepy.jit.faults import CompiledBoundsError

cached = functools.lru_cache(maxsize=None)


def _line(text: str) -> int:
    """The line of this file holding `text` (the statement a kernel faults at)."""
    with open(__file__) as f:
        return 1 + next(k for k, ln in enumerate(f) if text in ln and "return" not in ln)


def shifted_parallel():
    @T.prim_func
    def shifted(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(2) as bx:
            t = T.alloc_fragment((32,), "float32")
            T.copy(X[bx * 32], t)
            for i in T.Parallel(32):
                Y[bx * 32 + i] = t[i + bx]  # block 1 reads t[32]

    return shifted, "t[i + bx]  # block 1", dict(X=np.arange(64, dtype=np.float32),
                                       Y=np.zeros(64, np.float32))


def copy_region():
    @T.prim_func
    def copy_into(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32"),
                  O: T.Tensor((1,), "int32")):
        with T.Kernel(2) as bx:
            s = T.alloc_shared((32, 64), "float32")
            T.clear(s)
            off = O[0]
            T.copy(X[bx * 32, 0], s[off:off + 16, 0:64])  # rows 20..35 of 32
            T.copy(s[0:16, :], Y[bx * 32, 0])

    return copy_into, "s[off:off + 16, 0:64])  #", dict(X=np.ones((64, 64), np.float32),
                                             Y=np.zeros((64, 64), np.float32),
                                             O=np.array([20], np.int32))


def gemm_operand():
    @T.prim_func
    def gemm_part(A: T.Tensor((32, 32), "float32"), C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, 2) as (bx, by):
            a = T.alloc_shared((32, 32), "float32")
            c = T.alloc_fragment((16, 16), "float32")
            T.copy(A, a)
            T.clear(c)
            T.gemm(a[by * 16:by * 16 + 16, 8:24], a[0:16, 20:36], c)  # columns 20..35
            T.copy(c, C[by * 16, 0])

    return gemm_part, "T.gemm(a[by", dict(A=np.ones((32, 32), np.float32),
                                      C=np.zeros((32, 32), np.float32))


def global_load():
    @T.prim_func
    def shifted_read(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(2) as bx:
            for i in T.Parallel(32):
                Y[bx * 32 + i] = X[bx * 32 + i + 1] * 2.0  # block 1 reads X[64]

    return shifted_read, "X[bx * 32 + i + 1] * 2.0  # block 1", dict(
        X=np.arange(64, dtype=np.float32), Y=np.zeros(64, np.float32))


def global_store():
    @T.prim_func
    def gather_store(X: T.Tensor((4, 16), "float32"), P: T.Tensor((16,), "int32"),
                     Y: T.Tensor((4, 16), "float32")):
        with T.Kernel(4) as bx:
            for j in T.Parallel(16):
                Y[bx, P[j]] = X[bx, j]  # P holds 16: a write past Y's row

    p = np.arange(16, dtype=np.int32)[::-1].copy()
    p[5] = 16
    return gather_store, "Y[bx, P[j]] = X[bx, j]  # P", dict(
        X=np.ones((4, 16), np.float32), P=p, Y=np.zeros((4, 16), np.float32))


def global_atomic():
    @T.prim_func
    def histogram(X: T.Tensor((64,), "int32"), H: T.Tensor((8,), "float32")):
        with T.Kernel(2) as bx:
            for i in T.Parallel(32):
                T.atomic_add(H[X[bx * 32 + i]], 1.0)  # X holds -1 in block 1

    x = (np.arange(64, dtype=np.int32) % 8)
    x[40] = -1
    return histogram, "T.atomic_add(H[X[bx * 32 + i]], 1.0)", dict(
        X=x, H=np.zeros(8, np.float32))


CASES = {"parallel": shifted_parallel, "copy": copy_region, "gemm": gemm_operand,
         "global_load": global_load, "global_store": global_store,
         "global_atomic": global_atomic}


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0]


@pytest.mark.parametrize("tier", ["numba", "py"])
@pytest.mark.parametrize("case", list(CASES))
def test_out_of_range_local_index_raises_at_the_users_line(case, tier):
    kernel, marker, arrays = cached(CASES[case])()
    func = kernel.func
    with pytest.raises(OutOfBoundsError) as want:
        interp_run(func, {k: v.copy() for k, v in arrays.items()}, {}, strict=True)
    with pytest.raises(CompiledBoundsError) as got:
        jit.run(func, {k: v.copy() for k, v in arrays.items()}, {}, tier=tier, strict=True)
    err = got.value
    assert isinstance(err, TilepyError)
    assert err.loc.line == _line(marker)
    assert err.loc.file.endswith("test_bounds.py")
    # the same block, buffer, index, expected bound and shape as the interpreter says
    assert _first_line(err) == _first_line(want.value)
    assert err.hint == want.value.hint
    assert not any(f in str(err) for f in ("jit/bounds.py", "jit/faults.py", "_ck"))


@pytest.mark.parametrize("case", ["global_load", "global_store", "global_atomic"])
def test_out_of_range_global_elements_are_masked_by_default(case):
    kernel, _, arrays = cached(CASES[case])()
    a, b = both(kernel.func, arrays, {}, tier="py")  # numba: tests/jit/test_masking.py
    for name in a:
        assert_same_bits(a[name], b[name], name)
    if case == "global_load":  # X[64] reads 0: the last element doubles nothing
        assert a["Y"][63] == 0 and a["Y"][62] == 2 * 63
    elif case == "global_store":  # the store to Y[bx, 16] is skipped, the rest land
        assert (a["Y"] == 1).sum() == 4 * 15
    else:  # the add at H[-1] is skipped
        assert a["H"].sum() == 63


@pytest.mark.parametrize("case", ["parallel", "copy", "gemm"])
def test_block_local_accesses_outside_raise_even_when_not_strict(case):
    kernel, marker, arrays = cached(CASES[case])()
    with pytest.raises(CompiledBoundsError) as got:
        jit.run(kernel.func, {k: v.copy() for k, v in arrays.items()}, {}, tier="py")
    assert got.value.loc.line == _line(marker)


def proven():
    @T.prim_func
    def scale_rows(X: T.Tensor((64, 32), "float32"), Y: T.Tensor((64, 32), "float32"),
                   P: T.Tensor((16,), "int32")):
        with T.Kernel(4) as bx:
            t = T.alloc_fragment((16, 32), "float32")
            u = T.alloc_fragment((16, 32), "float32")
            perm = T.alloc_fragment((16,), "int32")
            T.copy(X[bx * 16, 0], t)
            T.copy(P[0], perm)
            for i, j in T.Parallel(16, 32):
                u[i, j] = t[i, j] * 2.0 + t[(i + 1) % 16, 31 - j]
            for i, j in T.Parallel(16, 32):
                Y[bx * 16 + i, j] = u[perm[i], j]  # data-dependent: checked per element

    return scale_rows


def test_proven_accesses_are_unchecked_and_data_dependent_ones_are_checked():
    func = cached(proven)().func
    src = jit.source(func)
    # only u[perm[i], j], once in each copy of its nest (jit/passes/versioning.py)
    assert src.count("_ck2(") == src.count("u[_ck2(") == 2
    assert "_region(" not in src  # whole-tile copies into local buffers: proven
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    p = rng.permutation(16).astype(np.int32)
    a, b = both(func, dict(X=x, Y=np.zeros((64, 32), np.float32), P=p), {})
    assert_same_bits(a["Y"], b["Y"], "Y")
    bad = p.copy()
    bad[3] = 16
    for tier in ("numba", "py"):
        with pytest.raises(CompiledBoundsError, match=r"block 0: out-of-bounds read of "
                           r"u\[16, 0\]: expected 0 <= index < 16 in dimension 0"):
            jit.run(func, dict(X=x, Y=np.zeros((64, 32), np.float32), P=bad), {}, tier=tier)
