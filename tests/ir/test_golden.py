"""Golden text of printed programs, compared exactly (TILEPY_REGEN_GOLDEN=1 rewrites them;
review the diff before committing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import strategies as S
from tests.ir import examples
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_func

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "matmul": examples.matmul,
    "softmax": examples.softmax_rows,
    "kitchen_sink": examples.kitchen_sink,
    "gemm_family_2": lambda: S.program(2),
    "reduce_family_6": lambda: S.program(6),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = format_func(CASES[name]())
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("TILEPY_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    assert parse(path.read_text()) == CASES[name]()
