"""A training step in the JIT's fast mode (through the autograd's direct launch path)
against exact mode: same loss and gradients within float32 rounding, not bitwise
(exhaustive: compiling the fast kernels takes a minute or more here)."""

import numpy as np
import pytest

import tilepy
from tilepy.models import nn, zoo

F = nn.functional


def _grads(**backend):
    nn.manual_seed(0)
    model = zoo.mlp(hidden=(32, 32))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 64)).astype(np.float32), rng.integers(0, 10, 16)
    with tilepy.backend("jit", **backend):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    return [loss.item()] + [p.grad for p in model.parameters()]


@pytest.mark.exhaustive
def test_fast_mode_step_matches_exact_mode_within_rounding():
    exact, fast = _grads(), _grads(fast=True)
    assert abs(exact[0] - fast[0]) < 1e-5 * abs(exact[0])
    for a, b in zip(exact[1:], fast[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def _lenet_grads(**backend):
    nn.manual_seed(0)
    model = zoo.lenet5()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 8)
    with tilepy.backend("jit", **backend):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    return [loss.item()] + [p.grad for p in model.parameters()]


@pytest.mark.exhaustive
def test_fast_mode_lenet_step_matches_exact_mode_within_rounding():
    exact, fast = _lenet_grads(), _lenet_grads(fast=True)
    assert abs(exact[0] - fast[0]) < 1e-5 * abs(exact[0])
    for a, b in zip(exact[1:], fast[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
