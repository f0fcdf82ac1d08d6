"""Shared helpers of the parallel tests: launches with a time limit, bitwise comparison."""

from __future__ import annotations

import numpy as np

import tilepy.parallel as tp

LIMIT = 20.0  # seconds a rank may wait for a peer in these tests: a bug fails, never hangs
PS = [1, 2, 3, 4, 5, 7, 8]


def launch(fn, p, *args, **kw):
    kw.setdefault("timeout", LIMIT)
    return tp.launch(fn, p, *args, **kw)


def bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).view(np.uint8).tobytes()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bits(a) == bits(b)


def inputs(p: int, n: int, dtype, seed: int = 0, scale: float = 100.0) -> list[np.ndarray]:
    """Per-rank inputs with mixed magnitudes and signs (so the order shows in the bits)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(p):
        x = rng.standard_normal(n) * scale * 10.0 ** rng.integers(-3, 4, n)
        out.append(x.astype(dtype))
    return out
