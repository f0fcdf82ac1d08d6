"""Training end to end: the zoo models' loss falls over a few steps (interpreter), and a
whole training step (forward, backward, update) gives the same bits on the JIT as on the
interpreter. The update is SGD with momentum through the elementwise kernels
(tilepy.models.zoo.digits.Momentum), a stand-in until tilepy.models.optim exists."""

import numpy as np
import pytest

import tilepy
from tilepy.models import nn
from tilepy.models.zoo import lenet5, mlp
from tilepy.models.zoo.digits import Momentum

F = nn.functional


def _data(shape, n=32, seed=0):
    """Separable classes: a class-dependent mean plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.int32)
    centres = rng.standard_normal((10, *shape)).astype(np.float32)
    x = centres[y] + 0.3 * rng.standard_normal((n, *shape)).astype(np.float32)
    return x, y


def _steps(model, x, y, steps, lr=0.05):
    opt, losses = Momentum(model.parameters(), lr), []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name, make, shape, ratio", [
    ("mlp", lambda: mlp(64, (32, 32), 10), (64,), 0.7),
    ("lenet5", lenet5, (1, 8, 8), 0.97),  # slower to start: falls steadily, less far
])
def test_zoo_model_loss_falls(name, make, shape, ratio):
    nn.manual_seed(0)
    model = make()
    x, y = _data(shape)
    with tilepy.backend("interp"):
        losses = _steps(model, x, y, 8, lr=0.1)
    assert losses[-1] < ratio * losses[0] and losses == sorted(losses, reverse=True), losses


def _bits_after_one_step(make, x, y):
    nn.manual_seed(3)
    model = make()
    loss = _steps(model, x, y, 1)[0]
    return loss, [p.data.copy() for p in model.parameters()], \
        [p.grad.copy() for p in model.parameters()]


def _assert_same_bits(make, shape):
    x, y = _data(shape, n=24, seed=5)
    with tilepy.backend("interp"):
        ref = _bits_after_one_step(make, x, y)
    with tilepy.backend("jit"):
        got = _bits_after_one_step(make, x, y)
    assert ref[0] == got[0]
    for a, b in zip(ref[1] + ref[2], got[1] + got[2]):
        assert a.tobytes() == b.tobytes()


def test_training_step_same_bits_on_jit_and_interpreter():
    _assert_same_bits(lambda: mlp(64, (48, 40), 10), (64,))


@pytest.mark.exhaustive  # compiles the conv and pooling kernels (about a minute here)
def test_lenet_training_step_same_bits_on_jit_and_interpreter():
    _assert_same_bits(lenet5, (1, 8, 8))
