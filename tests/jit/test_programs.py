"""Random fusion-style programs (the shared family: elementwise chains, reduce + cumsum,
pipelined gemm with epilogues, casts, copy chains) agree bit for bit between the
interpreter and the JIT, on hypothesis data with edge tiles.

The family is bounded (tests/strategies.py); under the `ci` profile the numba tier runs a
fixed half of it to bound the number of compiles, `thorough` runs all of it.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jit.oracle import assert_agree
from tests.strategies import FAMILY_SIZE, KINDS, arrays, program, sizes_for

THOROUGH = os.environ.get("TILEPY_HYPOTHESIS_PROFILE") == "thorough"
SEEDS = list(range(FAMILY_SIZE)) if THOROUGH else list(range(0, FAMILY_SIZE, 2)) + [1, 3]


def _shape(buf, sizes):
    return tuple(sizes[s.name] if hasattr(s, "name") else int(s.value) for s in buf.shape)


def _case(seed: int):
    func = program(seed)
    return sizes_for(func).flatmap(lambda sz: st.tuples(
        st.just(func), st.just(sz),
        st.fixed_dictionaries({p.name: arrays(p.dtype.name, _shape(p, sz))
                               for p in func.params})))


@given(case=st.sampled_from(SEEDS).flatmap(_case))
@settings(max_examples=60 if not THOROUGH else 400)
def test_family_numba(case):
    func, sizes, arrs = case
    assert_agree(func, arrs, sizes, tier="numba")


@given(case=st.sampled_from(range(FAMILY_SIZE)).flatmap(_case))
@settings(max_examples=40)
def test_family_py_tier(case):
    func, sizes, arrs = case
    assert_agree(func, arrs, sizes, tier="py")


def test_family_covers_every_kind():
    kinds = {program(s).name.split("_")[0] for s in SEEDS}
    assert kinds == set(KINDS)
