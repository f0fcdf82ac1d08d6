"""Parameter initialisation: the generator layers draw from, and `manual_seed` to make
model construction reproducible (numpy's PCG64; values differ from PyTorch's)."""

from __future__ import annotations

import numpy as np

_RNG = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    _RNG[0] = np.random.default_rng(seed)


def uniform(shape, bound: float, dtype) -> np.ndarray:
    """U(-bound, bound) samples (PyTorch's default for Linear and Conv2d)."""
    return _RNG[0].uniform(-bound, bound, size=shape).astype(dtype)


def normal(shape, dtype) -> np.ndarray:
    """N(0, 1) samples (PyTorch's default for Embedding)."""
    return _RNG[0].standard_normal(size=shape).astype(dtype)


def fill_normal(out: np.ndarray) -> None:
    """out = N(0, 1) samples: the values normal(out.shape, out.dtype) would return (a host
    fill: models/kernels/record.filled draws them again on each replay)."""
    out[...] = _RNG[0].standard_normal(size=out.shape).astype(out.dtype)


def seed() -> int:
    """A 32-bit seed for a counter-based generator (dropout)."""
    return int(_RNG[0].integers(0, 2**32))
