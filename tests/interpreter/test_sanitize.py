"""Planted faults are caught with the block, buffer, element and the user's line; the
checks cost nothing where programs are right, and sanitize=False skips the costly ones."""

import os

import numpy as np
import pytest

import tilepy.interpreter
from tests.interpreter import kernels as K
from tilepy import jit
from tilepy.errors import OutOfBoundsError, RaceError, TilepyError, UninitializedReadError
from tilepy.interpreter import run

KFILE = K.__file__


def _raises(kernel, arrays, err, **kw) -> TilepyError:
    with pytest.raises(err) as info:
        run(kernel.func, arrays, {}, **kw)
    e = info.value
    assert e.loc.file == KFILE
    text = str(e)
    pkg = os.path.dirname(tilepy.interpreter.__file__) + os.sep
    for internal in (pkg, "numpy", "Traceback", "general_key", "evaluate", "access."):
        assert internal not in text
    return e


def _check(e: TilepyError, factory, line_text: str, *pieces: str) -> None:
    assert e.loc.line == K.line_of(factory, line_text)
    assert line_text in str(e)  # the source line is shown
    for p in pieces:
        assert p in e.message, (p, e.message)


@pytest.mark.parametrize("batch", [True, False])
def test_unguarded_edge_load_names_block_buffer_index_line(batch):
    # strict mode: a global element outside its buffer raises (by default it is masked:
    # tests/interpreter/test_masking.py)
    x = np.arange(100, dtype=np.float32)
    e = _raises(K.oob_load(100, 32), dict(X=x, Y=np.zeros_like(x)), OutOfBoundsError,
                batch=batch, strict=True)
    _check(e, K.oob_load, "planted: no edge guard", "block 3", "X[100]", "got 100",
           "shape (100,)")


def test_local_buffer_read_past_its_end():
    x = np.arange(8, dtype=np.float32)
    e = _raises(K.oob_local(8), dict(X=x, Y=np.zeros_like(x)), OutOfBoundsError)
    _check(e, K.oob_local, "planted: reads t[block]", "block 0", "t[8]")


@pytest.mark.parametrize("batch", [True, False])
def test_two_blocks_writing_one_tile_race(batch):
    x = np.arange(16, dtype=np.float32)
    e = _raises(K.race(16), dict(X=x, Y=np.zeros(4, np.float32)), RaceError, batch=batch)
    _check(e, K.race, "planted: every block writes", "block 1", "block 0", "Y[0]")


def test_scalar_store_race_names_the_first_pair():
    x = np.arange(8, dtype=np.float32)
    e = _raises(K.race_scalar(8), dict(X=x, Y=np.zeros(8, np.float32)), RaceError)
    _check(e, K.race_scalar, "planted: blocks 2k", "block 1", "block 0", "Y[0]")


def test_gemm_into_an_uncleared_fragment():
    # strict mode reports it; by default a fresh fragment reads as zero (below)
    a = np.ones((8, 8), np.float32)
    e = _raises(K.uninit_gemm(8), dict(A=a, C=np.zeros_like(a)), UninitializedReadError,
                strict=True)
    _check(e, K.uninit_gemm, "planted: C_l never cleared", "block 0", "C_l[0, 0]",
           "fragment")
    assert "clear" in e.hint


@pytest.mark.parametrize("batch", [True, False])
def test_partially_written_fragment(batch):
    x = np.arange(8, dtype=np.float32)
    e = _raises(K.uninit_partial(8), dict(X=x, Y=np.zeros_like(x)), UninitializedReadError,
                batch=batch, strict=True)
    _check(e, K.uninit_partial, "planted: t[n - 1]", "block 0", "t[7]")


def test_fresh_fragments_read_as_zero_unless_strict_as_on_the_jit():
    # TileLang leaves a fresh fragment undefined (an uninitialised register array); both
    # backends give it zeros by default, so the two agree bit for bit, and strict mode
    # keeps the report. Shared memory is still reported by default.
    a = (np.arange(64, dtype=np.float32).reshape(8, 8) % 5) - 2
    want = a @ a
    c = np.full_like(a, np.nan)
    run(K.uninit_gemm(8).func, dict(A=a, C=c), {})
    assert c.tolist() == want.tolist()
    cj = np.full_like(a, np.nan)
    jit.run(K.uninit_gemm(8).func, dict(A=a, C=cj), {})
    assert cj.tobytes() == c.tobytes()
    _raises(K.uninit_shared(8), dict(A=a, C=np.zeros_like(a)), UninitializedReadError)


def test_sanitize_false_skips_uninit_and_race_but_not_bounds():
    x = np.arange(8, dtype=np.float32)
    y = np.full(8, -1.0, np.float32)
    run(K.uninit_partial(8).func, dict(X=x, Y=y), {}, sanitize=False)
    assert y[:7].tolist() == (x[:7] + 1).tolist()  # block 1 ran last
    y4 = np.zeros(4, np.float32)
    run(K.race(16).func, dict(X=np.arange(16, dtype=np.float32), Y=y4), {}, sanitize=False)
    assert y4.tolist() == [12, 13, 14, 15]  # the last block's write wins, as in block order
    with pytest.raises(OutOfBoundsError):
        run(K.oob_load(100, 32).func, dict(X=np.zeros(100, np.float32),
                                           Y=np.zeros(100, np.float32)), {}, sanitize=False,
            strict=True)


def test_correct_programs_leave_no_false_alarm():
    # every block writes its own tile; guarded edges; the same block rewriting is fine
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    run(K.affine(1000, 128, "float32", 2.0, 0.0).func, dict(X=x, Y=y), {})
    run(K.affine(1000, 128, "float32", 2.0, 0.0).func, dict(X=y, Y=y), {})  # in place
    assert y.tolist() == (x * 4).tolist()
