"""Random fusion-style programs (the shared family: elementwise chains, reduce + cumsum,
pipelined gemm with epilogues, casts, copy chains) agree bit for bit between the
interpreter and the JIT, on hypothesis data with edge tiles.

The family is bounded (tests/strategies.py); every listed program is compiled once and
run on many inputs. Under the `ci` profile the numba tier compiles the first ten (two of
each kind), `thorough` all of them.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jit.oracle import assert_agree
from tests.strategies import FAMILY_SIZE, KINDS, arrays, program, sizes_for

THOROUGH = os.environ.get("TILEPY_HYPOTHESIS_PROFILE") == "thorough"
SEEDS = list(range(FAMILY_SIZE)) if THOROUGH else list(range(2 * len(KINDS)))


def _shape(buf, sizes):
    return tuple(sizes[s.name] if hasattr(s, "name") else int(s.value) for s in buf.shape)


def _case(seed: int):
    func = program(seed)
    return sizes_for(func).flatmap(lambda sz: st.tuples(
        st.just(func), st.just(sz),
        st.fixed_dictionaries({p.name: arrays(p.dtype.name, _shape(p, sz))
                               for p in func.params})))


@pytest.mark.parametrize("seed", SEEDS)
@given(data=st.data())
@settings(max_examples=10 if not THOROUGH else 100)
def test_family_numba(seed, data):
    func, sizes, arrs = data.draw(_case(seed))
    assert_agree(func, arrs, sizes, tier="numba")


@given(case=st.sampled_from(range(FAMILY_SIZE)).flatmap(_case))
@settings(max_examples=40)
def test_family_py_tier(case):
    func, sizes, arrs = case
    assert_agree(func, arrs, sizes, tier="py")


def test_family_covers_every_kind():
    kinds = {program(s).name.split("_")[0] for s in SEEDS}
    assert kinds == set(KINDS)
