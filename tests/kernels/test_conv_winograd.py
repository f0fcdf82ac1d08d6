"""Winograd F(2x2,3x3) and F(4x4,3x3) (tilepy/kernels/winograd.py): within the bound
checks.winograd_case derives, on many data in the interpreter, and on the JIT (exact: the
interpreter's bits; fast: the bound). The transforms themselves match float64 matrices;
the fused kernel gives the staged kernels' bits."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels import checks
from tilepy.kernels.winograd import MATRICES, Winograd, fused_block, winograd_filter

SHAPES = [(2, 7, 9, 5, 6), (1, 8, 8, 3, 70), (1, 4, 5, 66, 2)]


def _run(case, backend="interp", **options):
    with tilepy.backend(backend, **options):
        return case.kernel(*case.inputs)


@pytest.mark.parametrize("m", [2, 4])
def test_within_derived_bound(m):
    rng = np.random.default_rng(m)
    for shape in SHAPES:
        for scale in (1.0, 1e-3, 1e4):
            case = checks.winograd_case(rng, *shape, m=m, scale=scale)
            out = _run(case)
            err, ratio = case.error(out)
            assert case.passes(out), f"m={m} {shape}: error {err:.3g} is {ratio:.3g}x bound"


@pytest.mark.parametrize("m", [2, 4])
def test_bound_is_the_derived_one(m):
    # the bound's rounding count: G twice, B^T twice, product, C adds, A^T twice
    k = {2: (4, 3, 4), 4: (4, 5, 6)}[m]  # max nonzeros per row + 1: G, B^T, A^T
    assert checks.winograd_roundings(m, 64) == 2 * sum(k) + 1 + 64


@pytest.mark.parametrize("m", [2, 4])
def test_filter_transform_matches_float64(m):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3, 3, 5, 7)).astype(np.float32)
    G = np.array([[float(c) for c in r] for r in MATRICES[m]["G"]])
    ref = np.einsum("xi,ijcf,yj->xycf", G, w.astype(np.float64), G)
    mag = np.einsum("xi,ijcf,yj->xycf", np.abs(G), np.abs(w.astype(np.float64)), np.abs(G))
    with tilepy.backend("interp"):
        u = winograd_filter(5, 7, m)(w)
    assert (np.abs(u - ref) <= checks.gamma(8) * mag).all()


@pytest.mark.parametrize("m", [2, 4])
def test_fused_gives_the_staged_bits(m):
    # same expressions in the same order, whatever the block: 3 tiles per block leaves a
    # partial last block, and F = 70 > 64 filters one block of filters
    rng = np.random.default_rng(10 + m)
    for (N, H, W, C, F), bp in zip(SHAPES, (3, 0, 4)):
        x = rng.standard_normal((N, H, W, C)).astype(np.float32)
        w = rng.standard_normal((3, 3, C, F)).astype(np.float32)
        with tilepy.backend("interp"):
            outs = []
            for fused in (False, True):
                wg = Winograd(N, H, W, C, F, m, fused=fused, block_P=bp)
                wg.filters(w)
                outs.append(wg(x).copy().view(np.uint32))
        np.testing.assert_array_equal(outs[1], outs[0])


def test_fused_block_fits_half_of_l2():
    # floats per tile (m=4, C=F=64): 36*64 + 6*64 + 64 + 64 + 24*64 + 16*64 = 5376
    assert fused_block(64, 64, 4, l2=2**20) == 16  # 16 * 21504 B <= 512 KiB - 16 KiB
    assert fused_block(64, 64, 4, l2=4 * 2**20) == 64  # capped at 64
    assert fused_block(64, 64, 2, l2=2**20) == 32  # m=2: 2176 floats per tile
    assert fused_block(1024, 64, 4, l2=2**20) == 4  # the floor


def test_a_wrong_filter_transform_is_caught():
    # the check must notice a transform that is off by one coefficient
    rng = np.random.default_rng(2)
    case = checks.winograd_case(rng, 1, 6, 6, 4, 3, m=4)
    x, w = case.inputs
    with tilepy.backend("interp"):
        wg = Winograd(1, 6, 6, 4, 3, 4)
        wg.filters(w)
        wg.u[1, 1] *= 1.001
        assert not case.passes(wg(x))


# The fused kernel's compile (nine point bodies) takes about a minute of CPU: its JIT check
# runs in `make test-exhaustive`, with fast mode and F(4x4).
@pytest.mark.exhaustive
def test_on_the_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(4)
    case = checks.winograd_case(rng, 2, 7, 9, 5, 6, m=2)
    np.testing.assert_array_equal(_run(case, "jit"), _run(case))


# Each compile costs seconds here: fast mode and F(4x4) run in `make test-exhaustive`
# (bench/lib_conv.py also checks both modes of both before timing them).
@pytest.mark.exhaustive
@pytest.mark.parametrize("m", [2, 4])
def test_on_the_jit_both_modes(m):
    rng = np.random.default_rng(4)
    case = checks.winograd_case(rng, 2, 7, 9, 5, 6, m=m)
    np.testing.assert_array_equal(_run(case, "jit"), _run(case))
    out = _run(case, "jit", fast=True)
    assert case.passes(out), case.error(out)


@pytest.mark.exhaustive
@pytest.mark.parametrize("m", [2, 4])
def test_staged_on_the_jit_both_modes(m):
    rng = np.random.default_rng(5)
    case = checks.winograd_case(rng, 2, 7, 9, 5, 6, m=m)
    x, w = case.inputs
    outs = {}
    for backend, fast in (("interp", False), ("jit", False), ("jit", True)):
        with tilepy.backend(backend, **({"fast": True} if fast else {})):
            wg = Winograd(2, 7, 9, 5, 6, m, fused=False)
            wg.filters(w)
            outs[backend, fast] = wg(x).copy()
    np.testing.assert_array_equal(outs["jit", False], outs["interp", False])
    assert case.passes(outs["jit", True]), case.error(outs["jit", True])
