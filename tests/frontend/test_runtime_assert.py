"""`assert` on run-time values inside a T.Kernel block (TileLang's device assert): a block
whose condition is false fails the launch with a KernelAssertionError that names the block
(the lowest failing one, on both backends), the line and the message; passing data runs
unchanged. Build-time asserts are in test_tilelang_surface.py."""

import re

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import KernelAssertionError, TileSyntaxError
from tilepy.ir import format_func, parse


@T.prim_func
def lookup(Idx: T.Tensor((8,), "int32"), Table: T.Tensor((16,), "float32"),
           Out: T.Tensor((8,), "float32")):
    with T.Kernel(2, 2) as (bx, by):
        for i in T.Parallel(2):
            k = Idx[(by * 2 + bx) * 2 + i]
            assert k >= 0 and k < 16, "index outside the table"
            Out[(by * 2 + bx) * 2 + i] = Table[k] * 2


TABLE = np.arange(16, dtype=np.float32)
GOOD = np.array([1, 3, 5, 7, 9, 11, 13, 15], np.int32)


def _run(backend, idx):
    out = np.zeros(8, np.float32)
    with tilepy.backend(backend):
        lookup(idx, TABLE, out)
    return out


@pytest.mark.parametrize("backend", ["interp", "jit"])
def test_a_failing_block_is_named_with_the_line_and_message(backend):
    assert _run(backend, GOOD).tolist() == [2.0 * v for v in GOOD]
    bad = GOOD.copy()
    bad[3], bad[7] = 40, -1  # lanes of blocks (1, 0) and (1, 1): the lower one is named
    with pytest.raises(KernelAssertionError) as e:
        _run(backend, bad)
    assert str(e.value).splitlines()[0].endswith(
        "block (1, 0): assertion failed: index outside the table")
    with open(__file__) as f:
        line = next(n for n, text in enumerate(f, 1) if "assert k >= 0" in text)
    assert e.value.loc.line == line


def test_every_block_checks_its_own_values_in_the_interpreter():
    for pos, name in [(0, "block (0, 0)"), (2, "block (1, 0)"), (4, "block (0, 1)"),
                      (7, "block (1, 1)")]:
        bad = GOOD.copy()
        bad[pos] = 16
        with pytest.raises(KernelAssertionError, match=re.escape(f"{name}: assertion failed")):
            _run("interp", bad)


def test_the_assert_prints_and_parses_back_and_needs_a_launch():
    text = format_func(lookup.func, locs=False)
    assert "assert " in text and "'index outside the table'" in text
    assert format_func(parse(text), locs=False) == text

    with pytest.raises(TileSyntaxError, match="assert on a runtime value outside T.Kernel"):
        @T.prim_func
        def outside(X: T.Tensor((4,), "float32")):
            assert X[0] > 0
            with T.Kernel(1) as bx:
                X[bx] = 0.0


def test_an_fstring_message_is_shown_as_written():
    @T.prim_func
    def positive(X: T.Tensor((4,), "float32")):
        with T.Kernel(4) as bx:
            assert X[bx] > 0, f"X[{bx}] must be positive"

    with tilepy.backend("interp"):
        positive(np.ones(4, np.float32))
        with pytest.raises(KernelAssertionError, match=r"block 2: assertion failed: "
                                                       r"f'X\[\{bx\}\] must be positive'"):
            positive(np.array([1, 1, 0, 1], np.float32))
