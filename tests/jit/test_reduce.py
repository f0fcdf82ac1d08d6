"""T.reduce_max / T.reduce_min into formats without infinity (float8_e4m3fn, fp4): both
backends start a cleared reduction from the one identity (ir/tileops.py), a value of the
format, so an all-negative max, a max over nothing and a non-clearing max give the same
bits. The py tier runs the JIT's generated source without a Numba compile."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilepy.language as T
from tests.jit.oracle import assert_same_bits, both

LOWEST = {"float8_e4m3fn": -448.0, "float4_e2m1fn": -6.0}


def _kernel(dt: str):
    N = T.symbolic("N")

    @T.prim_func
    def extremes(X: T.Tensor((4, N), dt), Y: T.Tensor((4,), dt), Z: T.Tensor((4,), dt),
                 W: T.Tensor((4,), dt)):
        with T.Kernel(1) as _:
            y = T.alloc_fragment((4,), dt)
            z = T.alloc_fragment((4,), dt)
            w = T.alloc_fragment((4,), dt)
            T.copy(Z, z)
            T.reduce_max(X[0:4, 0:N], y, dim=1, clear=True)
            T.reduce_max(X[0:4, 0:N], z, dim=1, clear=False)
            T.reduce_min(X[0:4, 0:N], w, dim=1, clear=True)
            T.copy(y, Y)
            T.copy(z, Z)
            T.copy(w, W)

    return extremes.func


@pytest.mark.parametrize("dt", sorted(LOWEST))
def test_max_over_a_format_without_inf_starts_from_its_lowest_value(dt):
    func, np_dt = _kernel(dt), getattr(ml_dtypes, dt)
    lowest = LOWEST[dt]
    rng = np.random.default_rng(4)
    for n in (0, 1, 5):
        x = (-np.abs(rng.standard_normal((4, n))) * 3 - 0.5).astype(np_dt)  # all negative
        if n:
            x[0, :] = lowest  # a row at the format's lowest value: the identity itself
        z0 = np.array([-1.0, lowest, 0.0, -0.5]).astype(np_dt)
        arrays = {"X": x, "Y": np.zeros(4, np_dt), "Z": z0, "W": np.zeros(4, np_dt)}
        a, b = both(func, arrays, {"N": n}, tier="py")
        for k in "YZW":
            assert_same_bits(a[k], b[k], f"{dt} N={n} {k}")
        f = x.astype(np.float32)
        want_max = f.max(axis=1) if n else np.full(4, lowest, np.float32)
        want_min = f.min(axis=1) if n else np.full(4, -lowest, np.float32)
        assert np.array_equal(a["Y"].astype(np.float32), want_max)  # never NaN
        assert np.array_equal(a["W"].astype(np.float32), want_min)
        assert np.array_equal(a["Z"].astype(np.float32),
                              np.maximum(z0.astype(np.float32), want_max))
