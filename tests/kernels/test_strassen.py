"""Strassen-Winograd over the library gemm (tilepy/kernels/strassen.py): within the
normwise bound checks.strassen_case derives, for 0-3 levels and odd sizes, in the
interpreter; on the JIT (exact: the interpreter's bits; fast: the bound); levels by size."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels import checks
from tilepy.kernels.strassen import Strassen, levels, strassen


def _run(case, backend="interp", **options):
    with tilepy.backend(backend, **options):
        return case.kernel(*case.inputs)


@pytest.mark.parametrize("n_levels", [0, 1, 2, 3])
def test_within_derived_bound(n_levels):
    rng = np.random.default_rng(n_levels)
    for M, K, N in [(33, 70, 41), (16, 16, 16), (9, 7, 5)]:
        case = checks.strassen_case(rng, M, K, N, n_levels)
        out = _run(case)
        err, ratio = case.error(out)
        assert case.passes(out), f"{M}x{K}x{N}: error {err:.3g} is {ratio:.3g}x bound"


def test_constant_follows_the_recursion():
    assert checks.strassen_constant(64, 0) == 65 * 64
    assert checks.strassen_constant(64, 1) == 18 * 33 * 32 + 89 * 32
    assert checks.strassen_constant(7, 1) == 18 * 5 * 4 + 89 * 4  # ceil(7 / 2) = 4


def test_a_wrong_quadrant_is_caught():
    rng = np.random.default_rng(5)
    case = checks.strassen_case(rng, 40, 40, 40, 1)
    out = _run(case)
    out[20:, 20:] += 1.0  # C22 off by one everywhere
    assert not case.passes(out)


def test_reused_work_arrays_give_each_calls_product():
    # one Strassen object, two calls on other data: each gives the bits a fresh strassen()
    # gives (nothing of the first call's work arrays leaks into the second)
    rng = np.random.default_rng(8)
    prod = Strassen(33, 70, 41, 2)
    with tilepy.backend("interp"):
        for _ in range(2):
            a = rng.standard_normal((33, 70)).astype(np.float32)
            b = rng.standard_normal((70, 41)).astype(np.float32)
            np.testing.assert_array_equal(prod(a, b).view(np.uint32),
                                          strassen(a, b, 2).view(np.uint32))


def test_levels_by_size():
    assert levels(100, 100, 100, crossover=64) == 1
    assert levels(4096, 4096, 4096, crossover=1024) == 3
    assert levels(4096, 512, 4096, crossover=1024) == 0


def test_on_the_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(6)
    case = checks.strassen_case(rng, 33, 70, 41, 2)
    np.testing.assert_array_equal(_run(case, "jit"), _run(case))


@pytest.mark.exhaustive  # compiles the fast forms (seconds each here)
def test_fast_mode_within_bound():
    rng = np.random.default_rng(6)
    case = checks.strassen_case(rng, 33, 70, 41, 2)
    out = _run(case, "jit", fast=True)
    assert case.passes(out), case.error(out)
