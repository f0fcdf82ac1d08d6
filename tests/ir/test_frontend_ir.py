"""The front end's kernels print, parse back (locs included), verify and hash stably."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend import kernels
from tilepy.ir.hashing import structural_hash
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_func
from tilepy.ir.stmt import walk
from tilepy.ir.verify import verify

KERNELS = {
    "matmul": lambda: kernels.matmul(256, 192, 128, 64, 64, 32),
    "scale_rows": lambda: kernels.scale_rows,
    "counter": lambda: kernels.counter,
    "softmax": lambda: kernels.softmax.build(np.zeros((4, 128), np.float32)),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_frontend_kernel_roundtrips_and_verifies(name):
    f = KERNELS[name]().func
    verify(f)
    text = format_func(f)
    g = parse(text)
    assert g == f
    assert [s.loc for s in walk(g.body)] == [s.loc for s in walk(f.body)]
    assert g.loc == f.loc
    assert structural_hash(g) == structural_hash(f)


def test_kernel_ir_shows_basenames_and_a_source_header():
    text = str(KERNELS["matmul"]().ir)
    src = kernels.__file__
    assert text.splitlines()[0] == f"# source: {src}"
    assert text.count(src) == 1
    assert "T.gemm(A_shared, B_shared, C_local)  # kernels.py:21:16" in text
