"""Batching blocks never changes a result: batched, one block at a time, small batches and
seeded random orders give identical bits. Also hand-built IR the front end cannot spell."""

import functools
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.interpreter import kernels as K
from tests.interpreter.oracle import random_values, same, seq_cumsum, seq_fold, seq_gemm
from tilepy.errors import Loc, LoweringError, OutOfBoundsError
from tilepy.interpreter import run
from tilepy.ir import (
    Alloc,
    Buffer,
    Const,
    Copy,
    For,
    ForKind,
    Launch,
    Let,
    Load,
    PrimFunc,
    Region,
    Scope,
    Store,
    Var,
    dtype,
)

seeds = st.integers(0, 2**32 - 1)
cached = functools.lru_cache(maxsize=None)


def _cases():
    return {
        "gemm": (cached(K.gemm)(40, 48, 40, 16, 16, 16, "bfloat16", "float32", True, False,
                                True), lambda r: dict(A=random_values(r, (40, 40), "bfloat16"),
                                                      B=random_values(r, (40, 48), "bfloat16"),
                                                      C=np.zeros((40, 48), np.float32))),
        "softmax2d": (cached(K.parallel_2d)(37, 16, 8, "float32"),
                      lambda r: dict(X=random_values(r, (37, 16), "float32"),
                                     Y=np.zeros((16, 37), np.float32))),
        "branches": (cached(K.branches)(300, 32),
                     lambda r: dict(X=random_values(r, 300, "float32", specials=True),
                                    Y=np.zeros(300, np.float32))),
        "collatz": (cached(K.collatz)(75, 16),
                    lambda r: dict(X=r.integers(1, 60, 75).astype(np.int32),
                                   Steps=np.zeros(75, np.int32))),
        "reduce": (cached(K.reduce_rows)("absmax", 4, 10, 0, "float32", "float32", False, 5),
                   lambda r: dict(X=random_values(r, (20, 10), "float32", specials=True),
                                  Y=random_values(r, (5, 10), "float32"))),
        "prefix": (cached(K.prefix_of_blocks)(9),
                   lambda r: dict(X=random_values(r, 9, "float32"),
                                  Y=np.zeros(9, np.float32))),
    }


@pytest.mark.parametrize("name", sorted(_cases()))
@settings(max_examples=15)  # 4 schedules per example; the data varies, the kernels do not
@given(seed=seeds)
def test_every_schedule_gives_the_same_bits(name, seed):
    kernel, make = _cases()[name]
    outs = []
    schedules = [dict(), dict(batch=False), dict(random_order=True, seed=seed),
                 dict(small_batches=True)]
    for opts in schedules:
        arrays = make(np.random.default_rng(seed))
        if opts.pop("small_batches", False):
            with pytest.MonkeyPatch.context() as m:  # several batches per launch
                m.setattr(sys.modules["tilepy.interpreter.schedule"], "BATCH_ELEMENTS", 300)
                run(kernel.func, arrays, {}, **opts)
        else:
            run(kernel.func, arrays, {}, **opts)
        outs.append(arrays)
    for other in outs[1:]:
        for key in outs[0]:
            assert same(outs[0][key], other[key]), key


# ---------------------------------------------------------------- hand-built IR

i32, f32 = dtype("int32"), dtype("float32")
HERE = Loc(__file__, 1000, 4)


def c(v):
    return Const(v, i32)


def test_aliased_global_view_and_top_level_let():
    """`Xv` re-views X's storage as a flat buffer; a top-level Let feeds the grid."""
    n = Var("n")
    X = Buffer("X", (c(4), c(6)), f32)
    Xv = Buffer("Xv", (c(24),), f32, Scope.GLOBAL, data=X)
    Y = Buffer("Y", (c(24),), f32)
    bx, i, g = Var("bx"), Var("i"), Var("g")
    body = (Store(Y, (_add(_mul(bx, c(8)), i),), Load(Xv, (_add(_mul(bx, c(8)), i),)),
                  loc=HERE),)
    launch = Launch((g,), (bx,), (128,), (For(i, c(0), c(8), c(1), ForKind.PARALLEL, body),))
    func = PrimFunc("alias", (X, Y), (n,), (Let(g, _div(n, c(8))), launch))
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = np.zeros(24, np.float32)
    run(func, dict(X=x, Y=y), dict(n=24))
    assert y.tolist() == list(range(24))


def test_statements_outside_a_launch_are_rejected_at_their_line():
    X = Buffer("X", (c(4),), f32)
    S = Buffer("S", (c(4),), f32, Scope.SHARED)
    func = PrimFunc("bad", (X,), (), (Copy(Region(X, (c(0),), (c(4),)),
                                            Region(S, (c(0),), (c(4),)), loc=HERE),))
    with pytest.raises(LoweringError) as info:
        run(func, dict(X=np.zeros(4, np.float32)), {})
    assert info.value.loc == HERE and "outside T.Kernel" in info.value.message


def _call(op, a, b):
    from tilepy.ir import Call, Op

    return Call(Op[op], (a, b), i32)


def _add(a, b):
    return _call("ADD", a, b)


def _mul(a, b):
    return _call("MUL", a, b)


def _div(a, b):
    return _call("FLOORDIV", a, b)


@given(seed=seeds)
@settings(max_examples=10)
def test_tile_ops_under_a_block_varying_branch(seed):
    rng = np.random.default_rng(seed)
    n, bn = 48, 8
    x = random_values(rng, (n, bn), "float32")
    outs = []
    for opts in (dict(), dict(batch=False), dict(random_order=True, seed=seed)):
        y, r = np.zeros((n, bn), np.float32), np.zeros((n // bn, bn), np.float32)
        run(cached(K.some_blocks)(n, bn).func, dict(X=x, Y=y, R=r), {}, **opts)
        outs.append((y, r))
    for y, r in outs[1:]:
        assert same(y, outs[0][0]) and same(r, outs[0][1])
    y, r = outs[0]
    for b in range(n // bn):
        t = x[b * bn:(b + 1) * bn]
        if b % 2 == 0:
            assert same(r[b], seq_fold(t, 0, "sum", np.zeros(bn), "float32"))
            assert same(y[b * bn:(b + 1) * bn], seq_cumsum(t, 1, False, "float32"))
        else:
            assert same(y[b * bn:(b + 1) * bn], seq_gemm(t, t, np.ones((bn, bn)), "float32"))
            assert same(r[b], np.full(bn, b, np.float32))


def test_public_kernel_call_runs_here_with_backend_options(monkeypatch):
    import tilepy

    k = cached(K.affine)(1000, 128, "float32", 2.0, 1.0)
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    with tilepy.backend("interp", batch=False, sanitize=True):
        k(x, y)
    assert same(y, x * np.float32(2) + np.float32(1))
    oob = K.oob_load(100, 32)
    with pytest.raises(OutOfBoundsError), tilepy.backend("interp", strict=True):
        oob(np.zeros(100, np.float32), np.zeros(100, np.float32))
    monkeypatch.setenv("TILEPY_STRICT", "1")
    with pytest.raises(OutOfBoundsError), tilepy.backend("interp"):
        oob(np.zeros(100, np.float32), np.zeros(100, np.float32))
    with tilepy.backend("interp", strict=False):  # the block's choice beats the variable
        oob(x[:100].copy(), y[:100])
    assert same(y[:100], x[:100] * np.float32(2))


def test_a_missing_array_is_an_argument_error():
    from tilepy.errors import ArgumentError

    with pytest.raises(ArgumentError) as info:
        run(cached(K.affine)(1000, 128, "float32", 2.0, 1.0).func,
            dict(X=np.zeros(1000, np.float32)), {})
    assert "none for Y" in info.value.message


@pytest.mark.parametrize("inner", ["copy", "alloc"])
def test_block_level_statements_inside_parallel_are_rejected(inner):
    X = Buffer("X", (c(4),), f32)
    S = Buffer("S", (c(4),), f32, Scope.SHARED)
    i, bx = Var("i"), Var("bx")
    where = Loc(__file__, 2000, 8)
    stmt = (Copy(Region(X, (c(0),), (c(4),)), Region(S, (c(0),), (c(4),)), loc=where)
            if inner == "copy" else Alloc(S, loc=where))
    body = (Alloc(S),) if inner == "copy" else ()
    body += (For(i, c(0), c(4), c(1), ForKind.PARALLEL, (stmt,)),)
    func = PrimFunc("bad", (X,), (), (Launch((c(1),), (bx,), (128,), body),))
    with pytest.raises(LoweringError) as info:
        run(func, dict(X=np.zeros(4, np.float32)), {})
    assert info.value.loc == where and "T.Parallel" in info.value.message
    assert info.value.hint


def test_atomic_adds_to_shared_memory_keep_blocks_batched():
    import tilepy.language as T
    from tilepy.interpreter import schedule

    @T.prim_func
    def hist(X: T.Tensor((6, 64), "int32"), H: T.Tensor((6, 4), "float32")):
        with T.Kernel(6) as bx:
            s = T.alloc_shared((4,), "float32")
            T.clear(s)
            for i in T.Parallel(64):
                T.atomic_add(s[X[bx, i] % 4], X[bx, i] * 0.1)
            T.copy(s, H[bx, 0:4])

    body = hist.func.body[0].body
    assert not schedule._needs_order(body)  # each block's shared buffer is its own
    x = np.random.default_rng(1).integers(0, 1000, (6, 64)).astype(np.int32)
    outs = []
    for batch in (True, False):
        h = np.zeros((6, 4), np.float32)
        run(hist.func, dict(X=x, H=h), {}, batch=batch)
        outs.append(h)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    want = np.zeros((6, 4), np.float32)
    for b in range(6):
        for i in range(64):  # lane order, one rounding per add
            want[b, x[b, i] % 4] += np.float32(x[b, i] * np.float32(0.1))
    np.testing.assert_array_equal(outs[0], want)
