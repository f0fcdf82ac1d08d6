"""Training end to end: the zoo models' loss falls over a few steps (interpreter), and a
whole training step (forward, backward, update) gives the same bits on the JIT as on the
interpreter. The update is tilepy.models.optim.SGD with momentum (one fused kernel)."""

import numpy as np
import pytest

import tilepy
from tilepy.models import nn, optim
from tilepy.models.zoo import lenet5, mlp

F = nn.functional


def _data(shape, n=32, seed=0):
    """Separable classes: a class-dependent mean plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.int32)
    centres = rng.standard_normal((10, *shape)).astype(np.float32)
    x = centres[y] + 0.3 * rng.standard_normal((n, *shape)).astype(np.float32)
    return x, y


def _steps(model, x, y, steps, lr=0.05):
    opt, losses = optim.SGD(model.parameters(), lr=lr, momentum=0.9), []
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


def _fit_run(tmp_path, steps_before_resume=None, backend="interp"):
    """The real MLP (autograd, kernels) through fit() with AdamW and a shuffling loader, on
    `backend`: (losses, parameters) after 6 steps, resumed from a checkpoint after
    `steps_before_resume` steps when given (fresh objects, as a new process would)."""
    from tilepy.models.data import DataLoader, TensorDataset
    from tilepy.models.training import fit, load_checkpoint, save_checkpoint

    x, y = _data((64,), n=96, seed=2)

    def fresh():
        nn.manual_seed(1)
        model = mlp(64, (32, 32), 10)
        opt = optim.AdamW(model.parameters(), lr=3e-3)
        return model, opt, DataLoader(TensorDataset(x, y), 32, shuffle=True, seed=4)

    def loss_fn(out, target):
        return F.cross_entropy(out, target)

    model, opt, loader = fresh()
    with tilepy.backend(backend):
        if steps_before_resume is None:
            h = fit(model, loss_fn, opt, loader, epochs=2, progress=False, metrics=())
            return h, [p.data.copy() for p in model.parameters()]
        fit(model, loss_fn, opt, loader, epochs=2, max_steps=steps_before_resume,
            progress=False, metrics=())
        path = tmp_path / "ckpt.npz"
        save_checkpoint(path, model, opt, loader=loader, step=steps_before_resume)
        model, opt, loader = fresh()
        step = load_checkpoint(path, model, opt, loader=loader)["step"]
        h = fit(model, loss_fn, opt, loader, epochs=2, start_step=step, progress=False,
                metrics=())
        return h, [p.data.copy() for p in model.parameters()]


@pytest.mark.parametrize("backend", ["interp", "jit"])  # the jit: the MLP step's kernels
def test_fit_trains_the_real_mlp_and_resumes_bit_identically(tmp_path, backend):
    whole, params = _fit_run(tmp_path, backend=backend)
    _, resumed = _fit_run(tmp_path, steps_before_resume=4, backend=backend)
    losses = whole.losses  # 6 steps: 3 batches in each of 2 epochs
    assert len(losses) == 6 and losses == sorted(losses, reverse=True), losses
    for a, b in zip(params, resumed):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
