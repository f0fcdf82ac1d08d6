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
def test_fast_mode_im2col_convolutions_match_exact_mode_within_rounding():
    exact, fast = _lenet_grads(), _lenet_grads(fast=True)
    assert abs(exact[0] - fast[0]) < 1e-5 * abs(exact[0])
    for a, b in zip(exact[1:], fast[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("pad,bias", [(2, True), (0, False)])
def test_im2col_convolution_matches_the_conv_kernel(pad, bias):
    from tilepy.models.kernels import conv as C
    from tilepy.models.nn import im2col

    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    oh, ow = 6 + 2 * pad - 2, 7 + 2 * pad - 2
    want = np.empty((3, 5, oh, ow), np.float32)
    with tilepy.backend("interp"):
        C.conv2d_fwd(dtype="float32")(x, w, b if bias else np.zeros(5, np.float32),
                                      np.array([1, pad, 1], np.int32), want)
        got = im2col.conv(x, w, pad, b if bias else None)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
