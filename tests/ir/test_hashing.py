"""Structural hash: equal programs hash equal, locations do not matter, every change does."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys

from hypothesis import given

from tests import strategies as S
from tests.ir import examples
from tilepy.errors import Loc
from tilepy.ir.expr import Call, Const
from tilepy.ir.hashing import structural_equal, structural_hash
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_func
from tilepy.ir.stmt import Fill, For, Launch, PrimFunc
from tilepy.ir.types import dtype


def _relocate(f: PrimFunc) -> PrimFunc:
    """The same program with every statement location moved."""
    text = format_func(f).replace(".py:", "_moved.py:1")
    g = parse(text)
    assert g.loc != f.loc or not f.loc.line
    return g


def test_hash_is_hex_sha256():
    h = structural_hash(examples.matmul())
    assert len(h) == 64 and int(h, 16) >= 0


def test_equal_programs_hash_equal_and_locs_do_not_matter():
    f = examples.matmul()
    assert structural_hash(f) == structural_hash(examples.matmul())
    assert structural_hash(_relocate(f)) == structural_hash(f)


@given(S.programs())
def test_parse_print_preserves_hash(f):
    assert structural_hash(parse(format_func(f))) == structural_hash(f)


def test_family_programs_hash_distinct():
    hashes = {structural_hash(S.program(s)) for s in range(S.FAMILY_SIZE)}
    assert len(hashes) == S.FAMILY_SIZE


def test_changes_change_the_hash():
    f = examples.matmul()
    base = structural_hash(f)
    (launch,) = f.body
    variants = [
        examples.matmul(BK=16),
        examples.matmul(stages=2),
        dataclasses.replace(f, name="matmul2"),
        dataclasses.replace(f, out_idx=()),
        dataclasses.replace(f, body=(dataclasses.replace(launch, threads=(256,)),)),
    ]
    for g in variants:
        assert structural_hash(g) != base


def _fill_value(f: PrimFunc, value) -> PrimFunc:
    (launch,) = f.body
    body = tuple(dataclasses.replace(s, value=value) if isinstance(s, Fill) else s
                 for s in launch.body)
    return dataclasses.replace(f, body=(dataclasses.replace(launch, body=body),))


def test_float_literals_are_compared_by_bits():
    f = examples.matmul()
    f32 = dtype("float32")
    pos, neg = _fill_value(f, Const(0.0, f32)), _fill_value(f, Const(-0.0, f32))
    assert pos != neg  # Const compares float literals by their bits, like the hash
    assert structural_hash(pos) != structural_hash(neg)
    assert not structural_equal(pos, neg)
    nan1, nan2 = _fill_value(f, Const(math.nan, f32)), _fill_value(f, Const(float("nan"), f32))
    assert structural_hash(nan1) == structural_hash(nan2)
    assert structural_equal(nan1, nan2) and nan1 == nan2


def test_call_dtype_is_hashed():
    f = examples.matmul()
    (launch,) = f.body
    loop = next(s for s in launch.body if isinstance(s, For))
    stop = loop.stop
    assert isinstance(stop, Call)
    wrong = dataclasses.replace(stop, dtype=dtype("int64"))
    body = tuple(dataclasses.replace(s, stop=wrong) if s is loop else s for s in launch.body)
    g = dataclasses.replace(f, body=(Launch(launch.grid, launch.block_vars, launch.threads,
                                            body, loc=Loc()),))
    assert structural_hash(g) != structural_hash(f)


def test_hash_is_stable_across_processes():
    code = ("from tests.ir import examples; from tilepy.ir.hashing import structural_hash; "
            "print(structural_hash(examples.kitchen_sink()))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                         check=True)
    assert out.stdout.strip() == structural_hash(examples.kitchen_sink())
