"""jit/passes/initfill.py: a block-local array skips its zero fill only when every path writes all
of it before anything reads it. Each kernel here allocates `t` and uses it one way; the
test reads the allocation the generated source makes for `t`, and the kernels whose zeros
are skipped must still give the interpreter's bits."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_agree

F = "float32"


def whole_copy(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        T.copy(X[bx * 4, 0], t)  # every element: the copy zero-fills what it cannot read
        T.copy(t, Y[bx * 4, 0])


def edge_copy(X: T.Tensor((6, 10), F), Y: T.Tensor((6, 10), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)  # the last block's tile runs past X's end
        T.copy(X[bx * 4, 0], t)
        for i, j in T.Parallel(4, 16):
            t[i, j] = t[i, j] + 1.0
        T.copy(t, Y[bx * 4, 0])


def parallel_nest(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        for i, j in T.Parallel(4, 16):
            d = X[bx * 4 + i, j] * 2.0
            t[i, j] = d + 1.0
        T.copy(t, Y[bx * 4, 0])


def both_branches(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        if bx == 0:
            T.clear(t)
        else:
            T.copy(X[bx * 4, 0], t)
        T.copy(t, Y[bx * 4, 0])


def every_iteration(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        s = T.alloc_fragment((4,), F)
        T.clear(s)
        for k in T.serial(2):
            T.copy(X[bx * 4, k * 8], t[0:4, 0:8])  # half of t, first in the loop body
            T.fill(t, 1.0)
            T.reduce_sum(t, s, dim=1, clear=False)
        for i, j in T.Parallel(4, 16):
            Y[bx * 4 + i, j] = s[i]


def reduce_and_gemm(A: T.Tensor((16, 16), F), Y: T.Tensor((16, 16), F),
                    R: T.Tensor((16,), F)):
    with T.Kernel(1) as _:
        a = T.alloc_shared((16, 16), F)
        t = T.alloc_fragment((16, 16), F)
        r = T.alloc_fragment((16,), F)
        T.copy(A[0, 0], a)
        T.gemm(a, a, t, clear_accum=True)
        T.reduce_max(t, r, dim=1)
        T.copy(t, Y[0, 0])
        T.copy(r, R[0])


# kernels whose `t` keeps its zeros


def read_first(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        for i, j in T.Parallel(4, 16):
            t[i, j] = t[i, j] + X[bx * 4 + i, j]
        T.copy(t, Y[bx * 4, 0])


def part_copy(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        T.copy(X[bx * 4, 0], t[0:4, 0:8])
        T.copy(t, Y[bx * 4, 0])


def short_nest(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        for i, j in T.Parallel(4, 15):
            t[i, j] = X[bx * 4 + i, j]
        T.copy(t, Y[bx * 4, 0])


def guarded_store(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        for i, j in T.Parallel(4, 16):
            if j < 12:
                t[i, j] = X[bx * 4 + i, j]
        T.copy(t, Y[bx * 4, 0])


def swapped_store(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        for i, j in T.Parallel(4, 16):
            t[i, j % 4] = X[bx * 4 + i, j]
        T.copy(t, Y[bx * 4, 0])


def one_branch(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        if bx == 0:
            T.copy(X[bx * 4, 0], t)
        T.copy(t, Y[bx * 4, 0])


def accumulate(A: T.Tensor((16, 16), F), Y: T.Tensor((16, 16), F)):
    with T.Kernel(1) as _:
        a = T.alloc_shared((16, 16), F)
        t = T.alloc_fragment((16, 16), F)
        T.copy(A[0, 0], a)
        T.gemm(a, a, t)  # C += A @ A: reads t
        T.copy(t, Y[0, 0])


def reviewed(X: T.Tensor((8, 16), F), Y: T.Tensor((8, 16), F)):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((4, 16), F)
        flat = T.Tensor((64,), F, t.data)
        T.copy(X[bx * 4, 0], t)
        for i in T.Parallel(64):
            flat[i] = flat[i] * 2.0
        T.copy(t, Y[bx * 4, 0])


def _alloc(func, name: str = "t") -> str:
    src = jit.source(func)
    m = re.search(rf"^\s*{name} = np\.(zeros|empty)\(", src, re.M)
    assert m, src
    return m.group(1)


SKIPS = [whole_copy, edge_copy, parallel_nest, both_branches, reduce_and_gemm]
KEEPS = [read_first, part_copy, short_nest, guarded_store, swapped_store, one_branch,
         accumulate, reviewed]


def _prim(fn):
    return T.prim_func(fn).func


@pytest.mark.parametrize("fn", SKIPS, ids=lambda f: f.__name__)
def test_a_buffer_written_whole_first_skips_its_zeros_and_keeps_the_bits(fn):
    func = _prim(fn)
    assert _alloc(func) == "empty"
    rng = np.random.default_rng(0)
    arrays = {p.name: rng.standard_normal(tuple(int(d.value) for d in p.shape))
              .astype(np.float32) for p in func.params}
    assert_agree(func, arrays, {})


@pytest.mark.parametrize("fn", KEEPS, ids=lambda f: f.__name__)
def test_a_buffer_a_read_may_reach_first_keeps_its_zeros(fn):
    assert _alloc(_prim(fn)) == "zeros"


def test_a_loop_writing_part_first_keeps_the_zeros_and_the_fill_after_it_does_not_help():
    """every_iteration's loop copies into half of t before its T.fill: the first touch in
    the loop body is a partial write, so t keeps its zeros; s is cleared whole first."""
    func = _prim(every_iteration)
    assert _alloc(func, "t") == "zeros"
    assert _alloc(func, "s") == "empty"
