"""The JIT's pass pipeline (jit/passes/): every prefix leaves IR the verifier accepts and the
interpreter runs to the same bits as the kernel as written; the JIT equals both.

Programs: the random family of tests/strategies.py and the library's row kernels, where
every pass fires (initfill, fusion, hoist, guards). Data varies, programs do not: the
interpreter needs no compile, and the JIT comparisons reuse test_fusion's kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy.jit as jit
from tests.jit.oracle import assert_same_bits
from tests.jit.test_versioning import _arrays as _bias_arrays
from tests.jit.test_versioning import bias_rows
from tests.strategies import FAMILY_SIZE, arrays, program
from tilepy.errors import ArgumentError
from tilepy.interpreter import run as interp_run
from tilepy.ir import verify
from tilepy.ir.errors import VerifyError
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_access
from tilepy.ir.stmt import Alloc, Let, Versioned, walk
from tilepy.jit import passes
from tilepy.kernels import layernorm, rmsnorm, row_reduce, softmax

LIBRARY = {"softmax": lambda: softmax(block_N=64), "layernorm": lambda: layernorm(block_N=64),
           "rmsnorm": lambda: rmsnorm(block_N=64), "row_sum": lambda: row_reduce("sum"),
           "row_max": lambda: row_reduce("max")}


def _shape(buf, sizes):
    return tuple(sizes[s.name] if hasattr(s, "name") else int(s.value) for s in buf.shape)


def _outputs(func, arrs: dict, sizes: dict) -> dict:
    out = {k: v.copy() for k, v in arrs.items()}
    interp_run(func, out, sizes)
    return out


def _same_at_every_prefix(func, arrs: dict, sizes: dict) -> None:
    want = _outputs(func, arrs, sizes)
    for name, after in passes.snapshots(func, fuse=True)[1:]:
        verify(after)
        got = _outputs(after, arrs, sizes)
        for k in want:
            assert_same_bits(want[k], got[k], f"{func.name} after {name}, {k} {sizes}")


@given(data=st.data())
@settings(max_examples=20)
def test_every_prefix_of_the_pipeline_keeps_the_bits_of_random_programs(data):
    func = program(data.draw(st.integers(0, FAMILY_SIZE - 1)))
    sizes = {v.name: data.draw(st.integers(1, 40)) for v in func.sizes}
    arrs = {p.name: data.draw(arrays(p.dtype.name, _shape(p, sizes))) for p in func.params}
    _same_at_every_prefix(func, arrs, sizes)


def _row_case(rng, name: str, M: int, N: int):
    func = LIBRARY[name]().func
    sizes = {"M": M, "N": N}
    arrs = {p.name: rng.standard_normal(_shape(p, sizes)).astype(np.float32)
            for p in func.params}
    return func, arrs, sizes


@pytest.mark.parametrize("name", sorted(LIBRARY))
@given(M=st.integers(1, 12), N=st.integers(1, 150), seed=st.integers(0, 2**16))
@settings(max_examples=5)
def test_every_prefix_of_the_pipeline_keeps_the_bits_of_row_kernels(name, M, N, seed):
    _same_at_every_prefix(*_row_case(np.random.default_rng(seed), name, M, N))


def test_each_pass_fires_on_the_row_kernels():
    """The properties above are about something: each pass rewrites a row kernel."""
    func = LIBRARY["layernorm"]().func
    snaps = dict(passes.snapshots(func, fuse=True))
    allocs = [s for s in walk(snaps["initfill"].body) if isinstance(s, Alloc)]
    assert any(not a.zero_fill for a in allocs)
    assert any(isinstance(s, Versioned) for s in walk(snaps["fusion"].body))
    assert any(isinstance(s, Let) and s.var.name.startswith("hoist_")
               for s in walk(snaps["hoist"].body))
    snaps = dict(passes.snapshots(LIBRARY["softmax"]().func))  # its edge mask `if j >= N`
    assert str(snaps["guards"]) != str(snaps["hoist"])
    assert passes.run(func) is not func and passes.NAMES[-1] == "versioning"


@pytest.mark.parametrize("name", [  # layernorm goes through the same passes in test_fusion.py
    "softmax", pytest.param("layernorm", marks=pytest.mark.exhaustive)])
def test_the_jit_equals_the_interpreter_after_the_pipeline(name):
    rng = np.random.default_rng(5)
    func = LIBRARY[name]().func
    after = passes.run(func, fuse=True)
    for M, N in ((8, 64), (5, 130), (1, 1)):
        _, arrs, sizes = _row_case(rng, name, M, N)
        want = _outputs(after, arrs, sizes)
        got = {k: v.copy() for k, v in arrs.items()}
        jit.run(func, got, sizes, fuse=True)
        for k in want:
            assert_same_bits(want[k], got[k], f"{name} {k} {sizes}")


def test_ir_after_shows_a_pass_and_names_the_passes_on_a_typo():
    k = LIBRARY["rmsnorm"]()
    assert "T.versioned(" in k.ir_after("fusion", fast=True)
    assert "T.versioned(" not in k.ir_after("fusion")  # exact mode does not fuse
    assert "zero_fill=False" in k.ir_after("initfill")
    with pytest.raises(ArgumentError, match="no JIT pass named 'fusio'; expected one of "
                                            "initfill, fusion, hoist, guards, versioning"):
        k.ir_after("fusio")


def test_printed_ir_after_the_pipeline_parses_back():
    after = passes.run(LIBRARY["layernorm"]().func, fuse=True)
    assert parse(str(after)) == after



def test_the_versioning_pass_versions_a_bounded_nest_and_keeps_its_bits():
    func = bias_rows().func  # element accesses of X, B, Z in a T.Parallel nest
    for m, n in ((8, 16), (13, 37)):
        _same_at_every_prefix(func, _bias_arrays(m, n), {"m": m, "n": n})
    after = passes.run(func)
    (v,) = [s for s in walk(after.body) if isinstance(s, Versioned)]
    assert v.by == "versioning" and v.body == v.fallback
    # X[P[i], ...] is data-dependent: checked in both copies, so not listed
    assert sorted(format_access(x) for x in v.inbounds) == [
        "B[bx * 16 + j]", "P[i]", "X[r, bx * 16 + j]", "Z[r, bx * 16 + j]"]
    text = str(after)  # two copies of the nest bind the same names; it parses back
    assert parse(text) == after
    with pytest.raises(VerifyError, match=r"inbounds lists X\[0, 0\], which is not a "
                                          r"global access of the versioned body"):
        verify(parse(text.replace("inbounds=[", "inbounds=[X[0, 0], ", 1)))
