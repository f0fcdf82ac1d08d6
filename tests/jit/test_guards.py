"""jit/passes/guards.py: a loop whose whole body is `if <loop var> CMP <invariant>` runs over the
narrowed range instead of testing each iteration, with the interpreter's bits for sizes
below, inside and beyond the loop's range; other guards keep their test."""

from __future__ import annotations

import numpy as np
import pytest

import tilepy.language as T
from tests.jit.oracle import assert_agree
from tilepy.ir.stmt import If, walk
from tilepy.jit import passes

F = "float32"


def _kernel(guard: str):
    N, L = T.symbolic("N"), T.symbolic("L")

    @T.prim_func
    def guarded(X: T.Tensor((4, 32), F), Y: T.Tensor((4, 32), F), P: T.Tensor((N,), F),
                Q: T.Tensor((L,), F)):
        with T.Kernel(1) as _:
            t = T.alloc_fragment((4, 32), F)
            T.copy(X[0, 0], t)
            for i, j in T.Parallel(4, 32):
                if guard == "ge":
                    if j >= N:
                        t[i, j] = -1.0
                elif guard == "flipped":
                    if N > j:
                        t[i, j] = t[i, j] * 2.0
                elif guard == "window":
                    if j >= L and j <= N:
                        t[i, j] = t[i, j] + 1.0
                elif guard == "strict":
                    if j > L and N >= j:
                        t[i, j] = t[i, j] - 1.0
                elif guard == "scaled":  # arithmetic on j: keeps its test
                    if j * 2 >= N:
                        t[i, j] = 0.0
                else:  # with an else: keeps its test
                    if j < N:
                        t[i, j] = 3.0
                    else:
                        t[i, j] = 4.0
            T.copy(t, Y[0, 0])

    return guarded


@pytest.mark.parametrize("guard, narrowed", [("ge", True), ("flipped", True),
                                             ("window", True), ("strict", True),
                                             ("scaled", False),
                                             ("else", False)])
def test_guarded_loops_keep_the_interpreters_bits(guard, narrowed):
    func = _kernel(guard).func
    after = passes.run(func, upto="guards")
    assert (not any(isinstance(s, If) for s in walk(after.body))) == narrowed
    assert any(isinstance(s, If) for s in walk(func.body))  # the kernel as written keeps it
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    for n, l_ in ((1, 1), (5, 3), (31, 32), (32, 0), (40, 7), (100, 50), (12, 20)):
        arrays = {"X": x, "Y": np.zeros((4, 32), np.float32),
                  "P": np.zeros(n, np.float32), "Q": np.zeros(l_, np.float32)}
        assert_agree(func, arrays, {"N": n, "L": l_})
