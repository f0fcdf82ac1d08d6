"""Injected bugs on captured GPU outputs, for the validation tests and bench/validate_catch.py:
each returns the corrupted output (same dtype) and the perturbation's size relative to the
GPU's own error on the touched elements (> 2: the bug is above the GPU's natural error)."""

import ml_dtypes
import numpy as np


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _above(out, bad, exact, mask):
    with np.errstate(invalid="ignore"):
        pert = np.abs(_f64(bad) - _f64(out))[mask]
    pert = np.where(np.isnan(pert), np.inf, pert)  # NaN where the GPU had a number
    nat = np.abs(_f64(out) - exact)[mask]
    p, n = np.sqrt(np.mean(pert ** 2)), np.sqrt(np.mean(nat ** 2))
    return p / n if n > 0 else np.inf


def _2d(a):
    return a.reshape(-1, a.shape[-1]) if a.ndim > 1 else a.reshape(-1, 1)


def scale_row(out, exact, rng):
    bad = out.copy()
    b2 = _2d(bad)
    i = rng.integers(b2.shape[0])
    b2[i] = (_f64(b2[i]) * (1 + 2.0 ** -7)).astype(out.dtype)
    mask = np.zeros(b2.shape, bool)
    mask[i] = True
    return bad, _above(out, bad, exact, mask.reshape(out.shape))


def swap_columns(out, exact, rng):
    bad = out.copy()
    b2 = _2d(bad)
    if b2.shape[1] < 2:
        b2 = bad.reshape(-1, 1)
        i, j = rng.choice(b2.shape[0], 2, replace=False)
        b2[[i, j]] = b2[[j, i]]
    else:
        i, j = rng.choice(b2.shape[1], 2, replace=False)
        b2[:, [i, j]] = b2[:, [j, i]]
    changed = _f64(bad) != _f64(out)
    return bad, _above(out, bad, exact, changed) if changed.any() else 0.0


def zero_tile(out, exact, rng):
    bad = out.copy()
    b2 = _2d(bad)
    r0 = rng.integers(0, max(1, b2.shape[0] - 15))
    c0 = rng.integers(0, max(1, b2.shape[1] - 15))
    b2[r0:r0 + 16, c0:c0 + 16] = 0
    mask = np.zeros(b2.shape, bool)
    mask[r0:r0 + 16, c0:c0 + 16] = True
    return bad, _above(out, bad, exact, mask.reshape(out.shape))


def plus_one_ulp(out, exact, rng):
    """Every element's magnitude up by one ulp (bit pattern + 1)."""
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[out.dtype.itemsize]
    bad = (out.view(bits) + bits(1)).view(out.dtype)
    return bad, _above(out, bad, exact, np.ones(out.shape, bool))


def flip_low_bits(out, exact, rng, frac=0.01):
    """The lowest mantissa bit flipped in 1% of the elements."""
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[out.dtype.itemsize]
    flat = out.copy().reshape(-1).view(bits)
    idx = rng.choice(flat.size, max(1, int(frac * flat.size)), replace=False)
    flat[idx] ^= bits(1)
    bad = flat.view(out.dtype).reshape(out.shape)
    mask = np.zeros(out.size, bool)
    mask[idx] = True
    return bad, _above(out, bad, exact, mask.reshape(out.shape))


def softmax_no_max(x, dtype, compute):
    """Softmax without subtracting the row max, computed in `compute` (float32, or the
    storage dtype: every step rounded to it), stored as `dtype`."""
    c = np.dtype(compute) if compute != "bfloat16" else ml_dtypes.bfloat16
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.asarray(x, np.float32)).astype(c)
        s = np.sum(e.astype(np.float32), -1, keepdims=True).astype(c)
        return (e.astype(np.float32) / s.astype(np.float32)).astype(c).astype(dtype)


BUGS = {"scale_row": scale_row, "swap_columns": swap_columns, "zero_tile": zero_tile,
        "plus_one_ulp": plus_one_ulp}
