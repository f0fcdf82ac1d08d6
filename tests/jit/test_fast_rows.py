"""Fast mode's row work (issue 18): the one-key row max/min (`_fextreme`, jit/fast.py), row
fusion of tiles larger than L1 (jit/passes/fusion.py `_beyond_l1`: flash attention's
scores; a one-tile row written straight into its global destination, `_store_in_dest`), and
softmax's and gemm's outputs allocated without a zero fill (Kernel.empty_outputs)."""

import numpy as np
import pytest

import tilepy
import tilepy.jit as jit
from tilepy.errors import Loc
from tilepy.interpreter import run as interp_run
from tilepy.ir.stmt import For, Launch, Store, Versioned, walk
from tilepy.jit import fast, passes
from tilepy.jit.passes import fusion
from tilepy.kernel import Kernel, bind_arguments
from tilepy.kernels import checks, gemm, softmax
from tilepy.kernels.attention import flash_attention


def _rows():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 37)).astype(np.float32)
    x[1, 3:] = -np.inf  # a masked row
    x[2] = -np.inf
    x[3] = 0.0
    x[3, 5] = -0.0
    x[4] = -rng.random(37).astype(np.float32) - 1.0  # all negative
    x[5, 36] = 1e30
    return x


@pytest.mark.parametrize("tier", ["numba", "py"])
def test_fast_row_max_and_min_equal_numpys(tier):
    f = fast.namespace(tier)["_fextreme"]
    for row in _rows():
        for init in (np.float32(-np.inf), np.float32(0.5), np.float32(np.inf)):
            assert f(row, init, True) == max(init, row.max()), (row, init)
            assert f(row, init, False) == min(init, row.min()), (row, init)
        assert f(row[:0], np.float32(2.0), True) == 2.0


def _fused_runs_in_loops(func) -> int:
    launch = next(s for s in func.body if isinstance(s, Launch))
    loops = [s for s in walk(launch.body) if isinstance(s, For) and s.var.name == "k"]
    ids = {id(s.body) for s in loops}
    return sum(1 for (body, _), _run in fusion.plan(launch).items() if body in ids)


def test_scores_larger_than_l1_fuse_in_fast_mode():
    """128 x 128 float32 scores (64 KiB) are fused row by row in the KV loop (max, exp2,
    sum, rescale), 64 x 64 ones (16 KiB, in L1) are not; the fused fast kernel stays within
    the bound on a ragged length, and exact mode does not fuse."""
    small = flash_attention(1, 2, 160, 32, False, 64, 64).func
    big = flash_attention(1, 2, 160, 32, False, 128, 128).func
    assert _fused_runs_in_loops(small) == 0
    assert _fused_runs_in_loops(big) == 1
    assert "the fusion pass" not in jit.source(big)
    case = checks.attention_case(np.random.default_rng(5), 1, 2, 160, 32, False)
    case.kernel = flash_attention(1, 2, 160, 32, False, 128, 128)
    k = jit.compile(case.kernel.func, fast=True)
    assert "_fextreme(" in k.source and "the fusion pass" in k.source
    with tilepy.backend("jit", fast=True):
        got = case.kernel(*case.inputs)
    assert case.passes(got)


@pytest.mark.parametrize("M, N, block_N", [(13, 50, 64), (16, 64, 64), (9, 150, 64)])
def test_softmax_writes_every_output_element(M, N, block_N):
    """Its output is allocated uninitialised, so every element must be written: ragged
    rows, a row shorter than the tile and rows of several chunks, on the interpreter with
    the output filled with NaN first."""
    kern = softmax(block_N=block_N)
    assert kern.empty_outputs
    x = np.random.default_rng(M).standard_normal((M, N)).astype(np.float32)
    y = np.full((M, N), np.nan, np.float32)
    interp_run(kern.func, {"X": x, "Y": y}, {"M": M, "N": N})
    assert not np.isnan(y).any()
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


def test_empty_outputs_skip_the_zero_fill(monkeypatch):
    """A kernel with empty_outputs does not zero its out_idx outputs; others still do."""
    def no_zeros(*a, **k):
        raise AssertionError("np.zeros called")

    func = softmax(block_N=64).func
    x = np.ones((4, 8), np.float32)
    monkeypatch.setattr(np, "zeros", no_zeros)
    arrays, sizes = bind_arguments(func, (x,), Loc(), empty_outputs=True)
    assert arrays["Y"].shape == (4, 8) and sizes == {"M": 4, "N": 8}
    with pytest.raises(AssertionError, match="np.zeros called"):
        bind_arguments(func, (x,), Loc())
    assert not Kernel(func, [-1]).empty_outputs


def test_softmax_exponentials_go_straight_into_the_output_with_the_same_bits():
    """The fused one-tile softmax stores its exponentials into Y's row and scales them
    there (fusion.py `_store_in_dest`), never into the tile x; on the interpreter the
    fused IR gives the unfused IR's bits (full blocks fused, the ragged one not)."""
    func = softmax(block_N=64).func
    fused = passes.run(func, fuse=True, upto="fusion")
    runs = [v for v in walk(fused.body) if isinstance(v, Versioned) and v.by == "fusion"]
    one_tile = runs[0].body  # the first fused run: the N <= block_N branch
    stores = [st.buffer.name for st in walk(one_tile) if isinstance(st, Store)]
    assert stores.count("Y") == 2 and "x" not in stores, stores
    x = np.random.default_rng(8).standard_normal((19, 64)).astype(np.float32) * 8
    x[3] = -np.inf
    x[3, 7] = 0.0
    ys = []
    for f in (func, fused):
        y = np.full((19, 64), np.nan, np.float32)
        interp_run(f, {"X": x, "Y": y}, {"M": 19, "N": 64})
        ys.append(y)
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32))
    assert not np.isnan(ys[0]).any()


def test_gemm_writes_every_output_element():
    """The library gemm's C is allocated uninitialised too (its zero fill cost the fp8
    gemm's fast form 0.1 ms a call): ragged edges in M, N and K, on the interpreter with
    C filled with NaN first, give numpy's float64 product within float32 rounding."""
    kern = gemm(64, 64, 32, "float32")
    assert kern.empty_outputs
    rng = np.random.default_rng(9)
    a = rng.standard_normal((70, 45)).astype(np.float32)
    b = rng.standard_normal((45, 33)).astype(np.float32)
    c = np.full((70, 33), np.nan, np.float32)
    interp_run(kern.func, {"A": a, "B": b, "C": c}, {"M": 70, "N": 33, "K": 45})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
