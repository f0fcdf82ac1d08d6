"""The oracle of the models tests: an op's gradients against float64 central differences
of the same op (its forward kernels), and the tolerance they must meet."""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, no_grad

EPS = 1e-6
RTOL, ATOL = 1e-5, 1e-7


def _loss(fn, tensors, weights):
    out = fn(*tensors)
    return float(np.sum(out.data * weights))


def check(fn, *arrays, seed: int = 0) -> None:
    """Assert that autograd's gradient of sum(fn(*tensors) * R) (R random) matches central
    differences of the same expression, for every float64 input."""
    tensors = [Tensor(np.array(a, np.float64), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    weights = np.random.default_rng(seed).standard_normal(out.shape)
    (out * Tensor(weights)).sum().backward()
    with no_grad():
        for t in tensors:
            assert t.grad is not None and t.grad.shape == t.shape
            numeric = np.zeros(t.shape)
            flat, nflat = t.data.reshape(-1), numeric.reshape(-1)
            for i in range(flat.size):
                keep = flat[i]
                flat[i] = keep + EPS
                up = _loss(fn, tensors, weights)
                flat[i] = keep - EPS
                down = _loss(fn, tensors, weights)
                flat[i] = keep
                nflat[i] = (up - down) / (2 * EPS)
            scale = max(1.0, float(np.abs(numeric).max()))
            np.testing.assert_allclose(t.grad, numeric, rtol=RTOL, atol=ATOL * scale * 1e2)
