"""The op table is whole: every op has every entry, and `gaps` names the ones it lacks."""

import dataclasses
import math
import pathlib

import numpy as np
import pytest

from tilepy.ir import ops
from tilepy.ir.ops import OPS, Op, gaps

OPS_PY = pathlib.Path(ops.__file__)


def test_every_op_has_every_entry():
    assert gaps() == []


def _without(op: Op, **change) -> dict:
    """A copy of the table whose `op` row has `change` applied (None: the entry removed)."""
    table = dict(OPS)
    table[op] = dataclasses.replace(OPS[op], **change)
    return table


@pytest.mark.parametrize("op, change, message", [
    (Op.LOG, {"py": None}, "T.log: no py-tier function for _log"),
    (Op.SOFTPLUS, {"py": None}, "T.softplus: no py-tier function for _softplus"),
    (Op.EXP, {"py": None}, "T.exp: no py-tier function for math.exp"),  # sigmoid's too
    (Op.SHL, {"helper": None}, "T.shift_left: no Numba helper for _shl"),
    (Op.EXP, {"fast_ulps": None}, "T.exp: a fast form without its ulp charge (fast_ulps)"),
    (Op.TANH, {"helper": math.sinh},
     "T.tanh: its helper is not math.tanh, which the numba tier calls"),
    (Op.FLOOR, {"py": np.ceil}, "T.floor: both tiers call np.floor itself: helper and py "
                                "must be it"),
    (Op.ADD, {"helper": np.add}, "Op.ADD: a helper or py-tier function that its scalar "
                                 "form never calls"),
    (Op.RSQRT, {"py": math.sqrt}, "T.rsqrt: _sqrt is another function in Op.SQRT's row"),
    (Op.CEIL, {"names": ("floor",)}, "T.floor: T.floor also names Op.FLOOR"),
    (Op.SIN, {"scalar": "math.sin(_log({0}))"}, "T.sin: its scalar form calls math.sin, "
                                                 "_log; a row supplies one function"),
])
def test_gaps_name_the_op_the_entry_and_the_row(op, change, message):
    lines = OPS_PY.read_text().splitlines()
    line = next(i for i, t in enumerate(lines, 1) if f"OpDef(Op.{op.name}," in t)
    assert gaps(_without(op, **change)) == [f"{message} (row at ir/ops.py:{line})"]


def test_gaps_name_an_op_without_a_row():
    table = {op: row for op, row in OPS.items() if op is not Op.COS}
    assert gaps(table) == ["Op.COS: no row in the op table (ir/ops.py)"]


def test_surface_names_are_the_rows_names():
    """The front end's name maps are built from the rows: each T.<name> of a row maps to
    its op; plain functions exclude the casts and if_then_else (handlers of their own)."""
    assert ops.SURFACE["floormod"] is Op.MOD and ops.SURFACE["cast"] is Op.CAST
    assert set(ops.SURFACE) == {n for row in OPS.values() for n in row.names}
    assert {"cast", "reinterpret", "if_then_else"}.isdisjoint(ops.FUNCTIONS)
    assert ops.FUNCTIONS["bitwise_xor"] is Op.BITXOR
