"""Row top-k: values and indices equal a stable sort's (descending, ties by lowest index,
NaN first), on both backends."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels.checks_lib import topk_reference
from tilepy.kernels.topk import topk


def _data(rng):
    x = rng.integers(-3, 4, (11, 37)).astype(np.float32)  # many ties
    x[2, [3, 30]] = np.nan
    x[4] = -np.inf
    x[5, 7] = np.inf
    return x


@pytest.mark.parametrize("k", [1, 4])
def test_topk_matches_a_stable_sort(k):
    x = _data(np.random.default_rng(k))
    with tilepy.backend("interp"):
        v, i = topk(k)(x)
    rv, ri = topk_reference(x, k)
    assert np.array_equal(i, ri)
    assert np.array_equal(v, rv, equal_nan=True)
    assert list(i[4]) == list(range(k))  # all -inf: the lowest indices


def test_jit_gives_the_interpreters_bits():
    x = _data(np.random.default_rng(7))
    with tilepy.backend("interp"):
        want = topk(4)(x)
    with tilepy.backend("jit"):
        got = topk(4)(x)
    assert np.array_equal(want[1], got[1])
    assert np.array_equal(want[0], got[0], equal_nan=True)
