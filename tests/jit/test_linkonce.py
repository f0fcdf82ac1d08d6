"""A kernel's block function gets machine code once, in the kernel's library
(jit/linkonce.py), and the kernel still gives the same bits."""

from __future__ import annotations

import numpy as np

import tilepy.jit as jit
from tests.jit.test_api import axpy


def _emitted_modules(monkeypatch, name: str) -> list[str]:
    """The libraries whose final module (defining a function named like `name`) Numba
    emits machine code for while the test runs."""
    from numba.core import codegen as cg

    seen, emit = [], cg.JITCodeLibrary._finalize_specific

    def spy(self):
        if any(name in f.name and not f.is_declaration for f in self._final_module.functions):
            seen.append(self.name)
        emit(self)

    monkeypatch.setattr(cg.JITCodeLibrary, "_finalize_specific", spy)
    return seen


def test_the_block_gets_machine_code_once_in_the_kernels_library(monkeypatch):
    func = axpy("axpy_linkonce", tile=16)
    low_blocks = jit.compile(func, tier="py").source.count("def _block")
    assert low_blocks == 1
    seen = _emitted_modules(monkeypatch, "_block")
    k = jit.compile(func, disk=False)  # compiles now: the memory cache keys by tier
    assert seen == ["axpy_linkonce"]  # was also the block's, the gufunc's and 2 wrappers'
    rng = np.random.default_rng(3)
    for n in (1, 16, 37):  # one block (called directly) and several (the prange)
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        want = (x + x) + y
        k({"X": x, "Y": y}, {"N": n})
        assert y.tobytes() == want.tobytes()
