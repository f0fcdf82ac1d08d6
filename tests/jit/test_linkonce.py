"""A kernel's block function goes through LLVM's optimiser once, in the kernel's library
(jit/linkonce.py), and the kernel still gives the interpreter's bits."""

from __future__ import annotations

import numpy as np

import tilepy.jit as jit
from tests.jit.test_api import axpy


def _optimised_modules(monkeypatch, name: str) -> list[str]:
    """The libraries whose final module (defining a function named like `name`) Numba
    optimises while the test runs."""
    from numba.core import codegen as cg

    seen, optimize = [], cg.CPUCodeLibrary._optimize_final_module

    def spy(self):
        if any(name in f.name and not f.is_declaration for f in self._final_module.functions):
            seen.append(self.name)
        optimize(self)

    monkeypatch.setattr(cg.CPUCodeLibrary, "_optimize_final_module", spy)
    return seen


def test_the_block_is_optimised_once_in_the_kernels_library(monkeypatch):
    func = axpy("axpy_linkonce", tile=16)
    low_blocks = jit.compile(func, tier="py").source.count("def _block")
    assert low_blocks == 1
    seen = _optimised_modules(monkeypatch, "_block")
    k = jit.compile(func, disk=False)  # compiles now: the memory cache keys by tier
    assert seen == ["axpy_linkonce"]  # was also the block's, the gufunc's and 2 wrappers'
    rng = np.random.default_rng(3)
    for n in (1, 16, 37):  # one block (called directly) and several (the prange)
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        want = (x + x) + y
        k({"X": x, "Y": y}, {"N": n})
        assert y.tobytes() == want.tobytes()
