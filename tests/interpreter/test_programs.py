"""The shared program family (tests/strategies.py): every generated program gives the same
bits (or the same error) batched, one block at a time and in a random block order."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import strategies as S
from tests.interpreter.oracle import same
from tilepy.errors import TilepyError
from tilepy.interpreter import run
from tilepy.ir import Const


def _shape(buf, sizes):
    return tuple(int(s.value) if isinstance(s, Const) else sizes[s.name] for s in buf.shape)


def _outcome(func, arrays, sizes, **opts):
    a = {k: v.copy() for k, v in arrays.items()}
    try:
        run(func, a, sizes, **opts)
    except TilepyError as e:
        return type(e).__name__, e.loc.line
    return a


@settings(max_examples=60)
@given(data=st.data())
def test_generated_programs_do_not_depend_on_the_schedule(data):
    func = data.draw(S.programs(), label="program")
    sizes = data.draw(S.sizes_for(func), label="sizes")
    arrays = {p.name: data.draw(S.arrays(p.dtype.name, _shape(p, sizes)), label=p.name)
              for p in func.params}
    seed = data.draw(st.integers(0, 2**32 - 1), label="order seed")
    ref = _outcome(func, arrays, sizes)
    for opts in (dict(batch=False), dict(random_order=True, seed=seed)):
        got = _outcome(func, arrays, sizes, **opts)
        if isinstance(ref, tuple) or isinstance(got, tuple):
            assert ref == got
            continue
        for k in ref:
            assert same(np.asarray(ref[k]), np.asarray(got[k])), (func.name, k, opts)
