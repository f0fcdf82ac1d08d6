"""The JIT tests' oracle: run a kernel in the interpreter and in a JIT tier on copies of
the same arrays, and compare the results bit for bit (transcendental results in float64:
within one ulp, as the numerics contract allows).

NaN payloads: where both sides hold a NaN, its sign and payload may differ. IEEE 754 does
not say which NaN an op on two NaNs returns, x86 returns the first operand and LLVM may
commute operands; every other bit, NaN positions included, must agree."""

from __future__ import annotations

import numpy as np

import tilepy.jit as jit
from tilepy.interpreter import run as interp_run


def both(func, arrays: dict, sizes: dict, tier: str = "numba"):
    """(interpreter results, JIT results) on fresh copies of `arrays`."""
    a = {k: v.copy() for k, v in arrays.items()}
    b = {k: v.copy() for k, v in arrays.items()}
    interp_run(func, a, sizes)
    jit.run(func, b, sizes, tier=tier)
    return a, b


def _isnan(x: np.ndarray) -> np.ndarray:
    return np.isnan(x.astype(np.float32)) if x.dtype.kind == "V" else np.isnan(x)


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.itemsize}")


def assert_same_bits(expected: np.ndarray, got: np.ndarray, what: str = "",
                     ulp: int = 0) -> None:
    """Equal bits; with `ulp`, float64 values may differ by that many units in the last
    place (NaN positions must still agree)."""
    assert expected.dtype == got.dtype, (what, expected.dtype, got.dtype)
    e, g = bits(expected), bits(got)
    diff = e != g
    if diff.any() and expected.dtype.kind in "Vf":
        diff &= ~(_isnan(expected) & _isnan(got))
    if ulp and diff.any() and expected.dtype == np.float64:
        en, gn = np.isnan(expected), np.isnan(got)
        assert np.array_equal(en, gn), f"{what}: NaN positions differ"
        d = np.abs(e.astype(np.int64) - g.astype(np.int64))
        diff = ~en & (d > ulp)
    if diff.any():
        i = np.flatnonzero(diff.reshape(-1))[:5]
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.size} elements differ; at {i.tolist()}: "
            f"interpreter {expected.reshape(-1)[i]} (bits {e.reshape(-1)[i]}) vs "
            f"jit {got.reshape(-1)[i]} (bits {g.reshape(-1)[i]})")


def assert_agree(func, arrays: dict, sizes: dict, tier: str = "numba", ulp_for=()) -> None:
    a, b = both(func, arrays, sizes, tier)
    for k in a:
        assert_same_bits(a[k], b[k], f"{func.name}:{k}", ulp=1 if k in ulp_for else 0)
