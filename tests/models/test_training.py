"""fit(), evaluate(), checkpoints (save/load, corrupt files, other models), bit-identical
resume, logs and plots (tilepy.models.training).

The model here is a TEST MODEL: a linear softmax classifier in plain numpy whose backward
pass is derived by hand, standing in for tilepy.models' autograd (which the integration can
swap in: fit() only uses the PyTorch-like protocol below).
"""

import json
import os

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.models as tm
from tilepy.models import Parameter, Tensor
from tilepy.models.data import DataLoader, TensorDataset, shapes_images
from tilepy.models.optim import SGD, AdamW, MixedPrecision, lr_scheduler
from tilepy.models.training import (
    CheckpointError,
    TrainingError,
    evaluate,
    fit,
    load_checkpoint,
    plot_history,
    save_checkpoint,
)
from tilepy.precision.scaling import DynamicLossScaler


class _Loss(Tensor):
    """A scalar loss whose backward() runs the test model's hand-written gradient."""

    def __init__(self, value, backward, scale=1.0):
        super().__init__(np.float32(value))
        self._backward, self.scale = backward, scale

    def __mul__(self, s):  # loss scaling: the gradients scale with the loss
        return _Loss(self.data * s, self._backward, self.scale * float(s))

    def backward(self):
        self._backward(self.scale)


class LinearSoftmaxTestModel:
    """TEST MODEL: logits = x @ W + b, with the Module protocol fit() relies on."""

    def __init__(self, features, classes, seed=0):
        rng = np.random.default_rng(seed)
        self.W = Parameter((rng.standard_normal((features, classes)) * 0.1).astype(np.float32))
        self.b = Parameter(np.zeros(classes, np.float32))
        self.training = True

    def parameters(self):
        return [self.W, self.b]

    def train(self, mode=True):
        self.training = mode

    def __call__(self, x):
        x = np.asarray(x, np.float32).reshape(len(x), -1)
        w, b = self.W.data.astype(np.float32), self.b.data.astype(np.float32)  # bf16 too
        out = Tensor(x @ w + b)
        out.inputs = x
        return out

    def state_dict(self):
        return {"W": self.W.data.copy(), "b": self.b.data.copy()}

    def load_state_dict(self, state):
        self.W.data[...] = state["W"]
        self.b.data[...] = state["b"]


def cross_entropy_test_loss(out, y):
    """Mean softmax cross-entropy; backward puts dL/dW and dL/db on the test model."""
    z = out.data - out.data.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    m = len(y)
    loss = -np.log(p[np.arange(m), y]).mean()

    def backward(scale):
        d = p.copy()
        d[np.arange(m), y] -= 1
        d *= scale / m
        model = out.model
        model.W.grad = (out.inputs.T @ d).astype(np.float32)
        model.b.grad = d.sum(axis=0).astype(np.float32)
    return _Loss(loss, backward)


def _setup(seed=0, n=320):
    x, y = shapes_images(n, classes=3, size=8, channels=1, seed=seed)
    model = LinearSoftmaxTestModel(64, 3)
    real_call = model.__call__

    class Bound(type(model)):  # the output remembers its model (what autograd would do)
        def __call__(self, xb):
            out = real_call(xb)
            out.model = self
            return out
    model.__class__ = Bound
    loader = DataLoader(TensorDataset(x[:256], y[:256]), 32, shuffle=True, seed=seed)
    val = DataLoader(TensorDataset(x[256:], y[256:]), 64)
    return model, loader, val


def test_fit_trains_and_evaluates():
    model, loader, val = _setup()
    opt = AdamW(model.parameters(), lr=0.05)
    before = evaluate(model, cross_entropy_test_loss, val)
    hist = fit(model, cross_entropy_test_loss, opt, loader, epochs=8, val_loader=val,
               progress=False)
    after = evaluate(model, cross_entropy_test_loss, val)
    assert len(hist.steps) == 64 and [e["epoch"] for e in hist.epochs] == list(range(1, 9))
    assert np.mean(hist.losses[-8:]) < 0.7 * np.mean(hist.losses[:8])
    assert after["loss"] < before["loss"] and after["accuracy"] > 0.45  # chance: 1/3
    assert hist.epochs[-1]["val_accuracy"] == after["accuracy"]
    assert model.training  # evaluate() restored training mode


def test_fit_with_bf16_weights_and_float32_masters():
    model, loader, val = _setup()
    mp = MixedPrecision(model.parameters(), AdamW, lr=0.05, policy="bf16")
    hist = fit(model, cross_entropy_test_loss, mp, loader, epochs=8, val_loader=val,
               progress=False, clip_grad_norm=5.0)
    assert model.W.data.dtype == ml_dtypes.bfloat16 and mp.scaler.skipped_steps == 0
    assert np.mean(hist.losses[-8:]) < 0.7 * np.mean(hist.losses[:8])
    assert hist.epochs[-1]["val_accuracy"] > 0.45
    assert np.array_equal(model.W.data, mp.masters[0].data.astype(ml_dtypes.bfloat16))


def _train(steps, start=None, path=None, mixed=False):
    model, loader, _ = _setup()
    opt = (MixedPrecision(model.parameters(), AdamW, lr=0.05, loss_scaler=DynamicLossScaler(
        growth_interval=4)) if mixed else SGD(model.parameters(), lr=0.1, momentum=0.9,
                                                nesterov=True))
    sched = lr_scheduler.warmup_cosine(opt, 5, 30)
    step = 0
    if start is not None:
        step = load_checkpoint(start, model, opt, sched, loader)["step"]
    hist = fit(model, cross_entropy_test_loss, opt, loader, epochs=10, progress=False,
               scheduler=sched, max_steps=steps, start_step=step)
    if path is not None:
        save_checkpoint(path, model, opt, sched, loader, steps)
    return model, hist


@pytest.mark.parametrize("backend,mixed", [("interp", False), ("jit", False), ("interp", True)])
def test_resume_from_a_checkpoint_is_bit_identical(tmp_path, backend, mixed):
    # 21 steps straight vs 11 (stopping mid-epoch), save, load into fresh objects, 10 more;
    # mixed: bf16 weights, float32 masters, a loss scale that grows every 4 clean steps
    with tilepy.backend(backend):
        ref, ref_hist = _train(21, mixed=mixed)
        _train(11, path=tmp_path / "ck.npz", mixed=mixed)
        resumed, hist = _train(21, start=tmp_path / "ck.npz", mixed=mixed)
    assert np.array_equal(ref.W.data, resumed.W.data) and np.array_equal(ref.b.data,
                                                                         resumed.b.data)
    assert hist.losses == ref_hist.losses[11:]
    assert [s["lr"] for s in hist.steps] == [s["lr"] for s in ref_hist.steps[11:]]


def test_checkpoint_of_another_model_is_refused_before_changing_anything(tmp_path):
    model, loader, _ = _setup()
    save_checkpoint(tmp_path / "a.npz", model, step=3)
    other = LinearSoftmaxTestModel(64, 5)
    before = other.W.data.copy()
    with pytest.raises(CheckpointError, match=r"checkpoint of another model \(W: \(64, 3\) "
                                              r"in the file, \(64, 5\) in the model"):
        load_checkpoint(tmp_path / "a.npz", other)
    assert np.array_equal(other.W.data, before)
    with pytest.raises(CheckpointError, match="has no optimizer state"):
        load_checkpoint(tmp_path / "a.npz", model, SGD(model.parameters(), lr=0.1))


def test_save_load_round_trips_nested_state_without_pickle(tmp_path):
    import ml_dtypes

    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), 3: [1, 2.5, "x", None],
             "nested": {"bf16": np.array([1.5, -2], ml_dtypes.bfloat16), "t": (1, True)},
             "scalar": np.float64(0.25), "rng": np.random.default_rng(7).bit_generator.state}
    tm.save(state, tmp_path / "s.npz")
    got = tm.load(tmp_path / "s.npz")
    assert got[3] == [1, 2.5, "x", None] and got["nested"]["t"] == (1, True)
    assert got["w"].dtype == np.float32 and np.array_equal(got["w"], state["w"])
    assert got["nested"]["bf16"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(got["nested"]["bf16"].view(np.uint16),
                          state["nested"]["bf16"].view(np.uint16))
    assert got["scalar"] == 0.25 and isinstance(got["scalar"], np.float64)
    rng = np.random.default_rng()
    rng.bit_generator.state = got["rng"]  # 128-bit integers survive the JSON tree
    assert rng.random() == np.random.default_rng(7).random()
    assert os.listdir(tmp_path) == ["s.npz"]  # no temporary file is left behind


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "missing"])
def test_corrupt_or_partial_checkpoints_are_clear_errors(tmp_path, damage):
    path = tmp_path / "c.npz"
    tm.save({"w": np.arange(4000, dtype=np.float32)}, path)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        i = data.index(np.arange(4000, dtype=np.float32)[1000:1001].tobytes())
        path.write_bytes(data[:i] + b"\xff" + data[i + 1:])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    else:
        path.unlink()
    msg = "no checkpoint at" if damage == "missing" else "is not a readable tilepy checkpoint"
    with pytest.raises(CheckpointError, match=msg):
        tm.load(path)


def test_unsaveable_values_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="cannot save a set"):
        tm.save({"a": {1, 2}}, tmp_path / "x.npz")


def test_nan_loss_and_non_tensor_loss_are_errors():
    model, loader, _ = _setup()
    opt = SGD(model.parameters(), lr=0.1)
    with pytest.raises(TrainingError, match=r"the loss is nan at step 1 \(epoch 1\)"):
        fit(model, lambda out, y: _Loss(np.nan, lambda s: None), opt, loader, progress=False)
    with pytest.raises(TrainingError, match="returned a float at step 1"):
        fit(model, lambda out, y: 1.0, opt, loader, progress=False)


def test_logs_checkpoints_progress_and_plot(tmp_path, capsys):
    model, loader, val = _setup()
    opt = AdamW(model.parameters(), lr=0.05)
    hist = fit(model, cross_entropy_test_loss, opt, loader, epochs=2, val_loader=val,
               log_path=tmp_path / "log.csv", checkpoint_path=tmp_path / "ck.npz",
               progress=True)
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,train_loss,train_accuracy,val_loss,val_accuracy")
    assert len(rows) == 3
    assert "val_accuracy" in capsys.readouterr().err
    assert load_checkpoint(tmp_path / "ck.npz", model, opt, None, loader)["step"] == 16
    fit(model, cross_entropy_test_loss, opt, loader, epochs=3, log_path=tmp_path / "l.json",
        progress=False, history=hist)
    logged = json.loads((tmp_path / "l.json").read_text())
    assert len(logged["steps"]) == 24 and logged["epochs"][-1]["epoch"] == 3
    pytest.importorskip("matplotlib")
    plot_history(hist, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_fit_over_a_plain_list_of_batches_counts_epochs_itself():
    model, loader, _ = _setup()
    batches = list(loader)[:2]
    hist = fit(model, cross_entropy_test_loss, SGD(model.parameters(), lr=0.1), batches,
               epochs=5, max_steps=3, progress=False)
    assert [s["epoch"] for s in hist.steps] == [1, 1, 2]
    assert [e["epoch"] for e in hist.epochs] == [1]  # the second pass stopped midway


def test_a_schedule_stepped_per_epoch():
    model, loader, _ = _setup()
    opt = SGD(model.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    hist = fit(model, cross_entropy_test_loss, opt, loader, epochs=2, progress=False,
               scheduler=sched, scheduler_interval="epoch")
    assert {s["lr"] for s in hist.steps if s["epoch"] == 1} == {0.1}
    assert {s["lr"] for s in hist.steps if s["epoch"] == 2} == {0.05}
    with pytest.raises(TrainingError, match="scheduler_interval must be 'step' or 'epoch'"):
        fit(model, cross_entropy_test_loss, opt, loader, scheduler_interval="batch")
