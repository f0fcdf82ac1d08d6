"""TileLang's safe-memory-access rule on the interpreter: global element loads outside
their buffer give 0 (or T.annotate_safe_value's value), stores outside are skipped, the
report names what was masked; strict mode and block-local buffers raise."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import OutOfBoundsError
from tilepy.interpreter import MaskReport, run
from tilepy.ir.parser import parse

cached = functools.lru_cache(maxsize=None)


@cached
def shift(safe):
    @T.prim_func
    def shift(X: T.Tensor((T.symbolic("n"),), "float32"), S: T.Tensor((1,), "int32"),
              Y: T.Tensor((T.symbolic("n"),), "float32")):
        with T.Kernel(T.ceildiv(T.symbolic("n"), 8)) as bx:
            if safe is not None:
                T.annotate_safe_value({X: safe})
            for i in T.Parallel(8):
                Y[bx * 8 + i + S[0]] = X[bx * 8 + i - S[0]]  # both sides may leave

    return shift


def _shifted(x, s, fill):
    """What the rule gives: Y[j + s] = X[j - s] for j in 0..blocks*8-1 where j + s lies in Y."""
    n = len(x)
    y = np.full(n, -9.0, np.float32)
    for j in range(-(-n // 8) * 8):
        if 0 <= j + s < n:
            y[j + s] = x[j - s] if 0 <= j - s < n else fill
    return y


@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("n, s", [(16, 0), (16, 3), (13, 2), (5, 7), (20, -2)])
def test_loads_outside_read_zero_and_stores_outside_are_skipped(n, s, batch):
    x = np.arange(1, n + 1, dtype=np.float32)
    y = np.full(n, -9.0, np.float32)
    run(shift(None).func, dict(X=x, S=np.array([s], np.int32), Y=y), {"n": n}, batch=batch)
    assert y.tolist() == _shifted(x, s, 0.0).tolist()


def test_safe_value_replaces_zero_and_is_rounded_to_the_dtype():
    x = np.arange(1, 17, dtype=np.float32)
    y = np.full(16, -9.0, np.float32)
    run(shift(-1.5).func, dict(X=x, S=np.array([3], np.int32), Y=y), {"n": 16})
    assert y.tolist() == _shifted(x, 3, -1.5).tolist()
    assert y[3:6].tolist() == [-1.5] * 3


def test_the_report_names_buffer_counts_first_index_and_line():
    rep = MaskReport()
    x = np.arange(16, dtype=np.float32)
    run(shift(None).func, dict(X=x, S=np.array([3], np.int32), Y=np.zeros(16, np.float32)),
        {"n": 16}, masked=rep)
    assert rep.total() == (3, 3)
    xm, ym = rep.entries["X"], rep.entries["Y"]
    assert (xm.loads, xm.stores, xm.first_index) == (3, 0, (-3,))
    assert (ym.loads, ym.stores, ym.first_index) == (0, 3, (16,))
    assert xm.first_block == "block 0" and ym.first_block == "block 1"
    assert xm.loc.line == ym.loc.line and xm.loc.file == __file__
    assert "X: 3 loads, 0 stores outside the buffer; first X[-3] in block 0" in str(rep)
    quiet = MaskReport()
    run(shift(None).func, dict(X=x, S=np.array([0], np.int32), Y=np.zeros(16, np.float32)),
        {"n": 16}, masked=quiet)
    assert not quiet and str(quiet) == "no masked accesses"


def test_strict_mode_raises_as_before_through_every_switch(monkeypatch):
    k = shift(None)
    args = (np.arange(16, dtype=np.float32), np.array([3], np.int32), np.zeros(16, np.float32))
    with pytest.raises(OutOfBoundsError, match=r"block 0: out-of-bounds read of X\[-3\]"):
        with tilepy.backend("interp", strict=True):
            k(*args)
    monkeypatch.setenv("TILEPY_STRICT", "1")
    with pytest.raises(OutOfBoundsError, match="got -3"), tilepy.backend("interp"):
        k(*args)


@cached
def local_past_end():
    @T.prim_func
    def local_past_end(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1) as _:
            t = T.alloc_shared((8,), "float32")
            T.copy(X, t)
            for i in T.Parallel(8):
                Y[i] = t[i + 1]  # t[8]: shared memory is never masked

    return local_past_end


def test_shared_memory_outside_is_an_error_in_every_mode():
    with pytest.raises(OutOfBoundsError, match=r"t\[8\]"):
        run(local_past_end().func, dict(X=np.zeros(8, np.float32), Y=np.zeros(8, np.float32)),
            {})


def test_safe_values_print_and_parse_back():
    func = shift(-1.5).func
    text = str(func)
    assert "T.annotate_safe_value({X: -1.5})" in text
    assert parse(text) == func and parse(text).safe_values == (("X", -1.5),)
    inf = shift(float("-inf")).func
    assert parse(str(inf)).safe_value("X") == float("-inf")
    assert func.safe_value("Y") == 0.0


def test_annotate_safe_value_refuses_local_buffers_and_runtime_values():
    with pytest.raises(tilepy.TilepyError, match="expected a global buffer") as info:
        @T.prim_func
        def bad(X: T.Tensor((8,), "float32")):
            with T.Kernel(1) as _:
                t = T.alloc_shared((8,), "float32")
                T.annotate_safe_value({t: 1.0})  # planted: shared

    assert "planted: shared" in str(info.value)
    with pytest.raises(tilepy.TilepyError, match="expected a number known when"):
        @T.prim_func
        def bad2(X: T.Tensor((8,), "float32")):
            with T.Kernel(1) as _:
                T.annotate_safe_value(X, X[0])
