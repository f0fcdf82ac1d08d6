"""The statement table (ir/tileops.py): every statement kind has an entry, and reads() /
writes() name exactly the buffers each kind reads and writes."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from tilepy.ir import stmt as S
from tilepy.ir import tileops
from tilepy.ir.expr import Buffer, Const, Load, Region, Var
from tilepy.ir.stmt import ReduceKind
from tilepy.ir.types import Scope, float32, int32
from tilepy.precision.formats import FORMATS

KINDS = typing.get_args(S.Stmt)


def _c(v: int) -> Const:
    return Const(v, int32)


def _buf(name: str, data: Buffer | None = None, scope=Scope.SHARED) -> Buffer:
    return Buffer(name, (_c(4), _c(4)), float32, scope, data)


A, B, C, D = _buf("A"), _buf("B"), _buf("C"), _buf("D")
I = Buffer("I", (_c(4),), int32, Scope.LOCAL)  # read only through index expressions
i = Var("i")
at = Load(I, (_c(0),))  # an index that loads I
x = Load(B, (i, at))


def _r(b: Buffer, start=None) -> Region:
    return Region(b, (start or _c(0), _c(0)), (_c(4), _c(4)))


# per kind: (statement, buffers read, buffers written), by name, in the table's order
CASES = {
    S.Alloc: (S.Alloc(A), [], []),
    S.Let: (S.Let(Var("t", float32), x), ["B", "I"], []),
    S.Store: (S.Store(A, (i, at), x), ["I", "B", "I"], ["A"]),
    S.Copy: (S.Copy(_r(B), _r(A, at)), ["B", "I"], ["A"]),
    S.Fill: (S.Fill(_r(A), x), ["B", "I"], ["A"]),
    S.Gemm: (S.Gemm(_r(A), _r(B), _r(C)), ["A", "B", "C"], ["C"]),
    S.Reduce: (S.Reduce(ReduceKind.MAX, _r(B), _r(A), 1), ["B"], ["A"]),
    S.Cumsum: (S.Cumsum(_r(B), _r(A, at), 1), ["B", "I"], ["A"]),
    S.AtomicAdd: (S.AtomicAdd(_r(A), _r(B)), ["B", "A"], ["A"]),
    S.FetchAdd: (S.FetchAdd(Region(D, (i, _c(0)), (_c(1), _c(1))),
                            Region(A, (at, _c(0)), (_c(1), _c(1))), x), ["B", "I", "A", "I", "I"],
                 ["D", "A"]),
    S.For: (S.For(i, _c(0), Load(I, (_c(1),)), _c(1), S.ForKind.SERIAL,
                  (S.Store(D, (i, i), x),)), ["I"], []),
    S.If: (S.If(Load(C, (_c(0), _c(0))), (S.Store(D, (i, i), x),)), ["C"], []),
    S.While: (S.While(Load(C, (_c(0), _c(0))), ()), ["C"], []),
    # apart() compares the arrays' extents, it reads no element of them
    S.Versioned: (S.Versioned(Load(C, (_c(0), _c(0))), ((A, B),), (S.Store(D, (i, i), x),),
                              (), "test"), ["C"], []),
    S.Print: (S.Print("m", (A, x)), ["A", "B", "I"], []),
    S.Assert: (S.Assert(Load(C, (_c(0), at)), "m"), ["C", "I"], []),
    S.Breakpoint: (S.Breakpoint(), [], []),
    S.Launch: (S.Launch((Load(I, (_c(0),)),), (Var("bx"),), (128,),
                        (S.Store(D, (i, i), x),)), ["I"], []),
}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_kind_reads_and_writes_what_it_should(kind):
    assert kind in tileops.STMTS, f"{kind.__name__}: no entry in ir/tileops.py"
    assert kind in CASES, f"{kind.__name__}: no case in tests/ir/test_tileops.py"
    s, want_reads, want_writes = CASES[kind]
    assert [b.name for b in s.reads()] == want_reads
    assert [b.name for b in s.writes()] == want_writes


def test_a_missing_kind_is_named():
    s = S.Cumsum(_r(B), _r(A), 1)
    saved = tileops.STMTS.pop(S.Cumsum)
    try:
        with pytest.raises(KeyError, match="Cumsum: no entry in ir/tileops.py"):
            s.reads()
    finally:
        tileops.STMTS[S.Cumsum] = saved


def test_accumulating_destinations_are_read_only_when_they_accumulate():
    assert [b.name for b in S.Gemm(_r(A), _r(B), _r(C), clear_accum=True).reads()] == ["A", "B"]
    assert [b.name for b in S.Reduce(ReduceKind.SUM, _r(B), _r(A), 1, False).reads()] \
        == ["B", "A"]
    assert [b.name for b in tileops.reads(S.AtomicAdd(_r(A), x), updates=False)] == ["B", "I"]


def test_names():
    s = S.Reduce(ReduceKind.ABSMAX, _r(B), _r(A), 1)
    assert tileops.surface(s) == tileops.display(s) == "T.reduce_absmax"
    assert tileops.display(S.Alloc(A)) == "an allocation"
    assert tileops.surface(S.Cumsum(_r(B), _r(A), 1)) == "T.cumsum"


def test_root_follows_re_views():
    g = _buf("G", scope=Scope.GLOBAL)
    v = _buf("V", g, Scope.GLOBAL)
    w = _buf("W", v, Scope.GLOBAL)
    assert w.root is g and v.root is g and g.root is g
    f = S.PrimFunc("k", (g,), (), (S.Launch((_c(1),), (Var("bx"),), (128,),
                                            (S.Copy(_r(B), _r(w)),)),))
    assert S.written_params(f) == {"G"}


FLOATS = [n for n, f in FORMATS.items() if f.is_float]


@pytest.mark.parametrize("name", FLOATS)
def test_a_reductions_start_is_a_value_of_its_dtype_and_leaves_every_value_alone(name):
    """max's start is below every value of the format, min's above, and both survive the
    cast to the format unchanged (no NaN from an inf the format lacks)."""
    dt, np_dt = FORMATS[name], np.dtype(FORMATS[name].np_dtype)
    if dt.bits <= 16:  # every code (sub-byte formats sit in the low bits of a byte)
        codes = np.arange(2 ** dt.bits, dtype=np.uint16 if dt.bits == 16 else np.uint8)
        with np.errstate(invalid="ignore"):
            every = codes.view(np_dt).astype(np.float64)
    else:
        every = np.array([np.finfo(np_dt).min, np.finfo(np_dt).max], np.float64)
    every = every[~np.isnan(every)]
    lo, hi = (tileops.reduce_identity(k, dt) for k in (ReduceKind.MAX, ReduceKind.MIN))
    for v in (lo, hi):
        assert np.array([v]).astype(np_dt).astype(np.float64)[0] == v, (name, v)
    assert lo <= every.min() and hi >= every.max()
    assert tileops.reduce_identity(ReduceKind.SUM, dt) == 0
    if not dt.has_inf and dt.has_sign:
        assert lo == -dt.max_finite
