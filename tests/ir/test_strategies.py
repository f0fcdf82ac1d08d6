"""The shared strategies produce what they promise: edge values, bounded program families."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings

from tests import strategies as S
from tilepy.ir.hashing import structural_hash
from tilepy.ir.stmt import Gemm, Reduce, walk
from tilepy.ir.verify import verify


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float8_e4m3fn", "float16"])
def test_float_arrays_reach_edge_values(name):
    strat = S.arrays(name, (6,))
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    assert np.isnan(f64(find(strat, lambda a: np.isnan(f64(a)).any()))).any()
    neg_zero = find(strat, lambda a: ((f64(a) == 0) & np.signbit(f64(a))).any())
    assert (np.signbit(f64(neg_zero)) & (f64(neg_zero) == 0)).any()
    tiny = S.FORMATS[name].min_normal
    sub = find(strat, lambda a: ((np.abs(f64(a)) < tiny) & (f64(a) != 0)).any())
    assert ((np.abs(f64(sub)) < tiny) & (f64(sub) != 0)).any()
    if S.FORMATS[name].has_inf:
        assert np.isinf(f64(find(strat, lambda a: np.isinf(f64(a)).any()))).any()


@pytest.mark.parametrize("name,lo,hi", [("int4", -8, 7), ("uint4", 0, 15),
                                         ("int64", -2**63, 2**63 - 1), ("uint64", 0, 2**64 - 1)])
def test_int_arrays_span_exactly_their_range(name, lo, hi):
    strat = S.arrays(name, (3,))
    low = find(strat, lambda a: int(a.astype(object).min()) == lo)
    assert low.dtype == S.FORMATS[name].np_dtype
    assert int(find(strat, lambda a: int(a.astype(object).max()) == hi).astype(object).max()) == hi


@pytest.mark.parametrize("kind", S.KINDS)
def test_each_kind_family_is_bounded_and_valid(kind):
    seen = set()

    @settings(max_examples=60)
    @given(S.programs(kinds=(kind,), family=5))
    def draw(f):
        verify(f)
        assert f.name.startswith(kind)
        seen.add(structural_hash(f))

    draw()
    assert 1 < len(seen) <= 5


def test_gemm_and_reduce_families_hold_their_tile_ops():
    assert any(isinstance(s, Gemm) for s in walk(S.program(2).body))
    assert any(isinstance(s, Reduce) for s in walk(S.program(1).body))
