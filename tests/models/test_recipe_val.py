"""The recipes' validation split (`python -m tilepy.models.zoo.train --val-fraction F`):
a seeded held-out part of the training set, its loss reported per epoch, and the best
epoch's parameters restored before the test (interpreter, iris: no compiles)."""

import dataclasses

import numpy as np
import pytest

import tilepy
from tilepy.models.errors import ModelError
from tilepy.models.zoo import recipes, train


def test_split_is_seeded_disjoint_and_complete():
    rows, val = train.split(10, 0.3, seed=0)
    assert len(val) == 3 and sorted(np.concatenate([rows, val])) == list(range(10))
    again, other = train.split(10, 0.3, seed=0), train.split(10, 0.3, seed=1)
    assert np.array_equal(again[1], val) and not np.array_equal(other[1], val)
    assert np.array_equal(train.split(10, 0.0, seed=0)[0], np.arange(10))
    with pytest.raises(ModelError, match=r"val_fraction must be in \[0, 1\); got 1.0"):
        train.split(10, 1.0, seed=0)
    with pytest.raises(ModelError, match=r"val_fraction=0.9 of 2 training samples leaves none"):
        train.split(2, 0.9, seed=0)


def test_validation_loss_per_epoch_and_the_best_epoch_is_tested(monkeypatch):
    pytest.importorskip("sklearn")
    base = recipes.RECIPES["softmax_regression"]
    tasks = []

    def setup(seed):
        tasks.append(base.setup(seed))
        return tasks[-1]
    # a learning rate high enough that the validation loss rises again after its best
    monkeypatch.setitem(recipes.RECIPES, "softmax_regression",
                        dataclasses.replace(base, lr=3.0, setup=setup))
    lines = []
    with tilepy.backend("interp"):
        r = train.train("softmax_regression", epochs=8, progress=False, val_fraction=0.25,
                        log=lines.append)
        rows, val = train.split(120, 0.25, seed=0)
        restored = train._val_loss(tasks[0], val, None)
    losses = [e["val_loss"] for e in r["epochs"]]
    assert r["val_samples"] == 30 and r["steps"] == 8 and len(lines) == 8
    assert lines[0].startswith("epoch 1: train loss ") and "validation loss" in lines[0]
    assert r["best_epoch"] == 1 + int(np.argmin(losses)) < 8 and r["val_loss"] == min(losses)
    assert restored == r["val_loss"]  # the model holds the best epoch's parameters
    assert "best epoch 4 of 8 (30 validation samples)" in train._report(r, lower=False)


def test_a_recipe_trains_with_bf16_parameters_and_float32_masters(monkeypatch):
    pytest.importorskip("sklearn")
    import ml_dtypes

    base = recipes.RECIPES["softmax_regression"]
    tasks = []

    def setup(seed):
        tasks.append(base.setup(seed))
        return tasks[-1]
    monkeypatch.setitem(recipes.RECIPES, "softmax_regression",
                        dataclasses.replace(base, setup=setup))
    with tilepy.backend("interp"):
        r = train.train("softmax_regression", epochs=30, progress=False, precision="bf16")
    assert r["value"] > 0.8 and r["precision"] == "bf16"
    assert all(p.dtype == ml_dtypes.bfloat16 for p in tasks[0].model.parameters())
    assert "bf16 parameters, float32 masters" in train._report(r, lower=False)
