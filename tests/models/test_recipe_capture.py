"""The zoo's recipes capture their training step by default (`zoo.train`, `--eager` turns
it off) and give the eager run's model bit for bit; a step the capture refuses (an
embedding's host sort) runs eagerly after one log line (interpreter: no compiles)."""

import dataclasses

import numpy as np
import pytest

import tilepy
from tilepy.models.zoo import recipes, train
from tilepy.models.zoo.recipe_step import RecipeStep


def _run(monkeypatch, name, epochs, captured):
    base, tasks, lines = recipes.RECIPES[name], [], []

    def setup(seed):
        tasks.append(base.setup(seed))
        return tasks[-1]
    monkeypatch.setitem(recipes.RECIPES, name, dataclasses.replace(base, setup=setup))
    with tilepy.backend("interp"):
        r = train.train(name, epochs=epochs, progress=False, log=lines.append,
                        captured=captured)
    return r, tasks[0].model.state_dict(), lines


@pytest.mark.parametrize("name, epochs", [("softmax_regression", 6), ("residual_mlp", 2)])
def test_a_captured_recipe_gives_the_eager_model(monkeypatch, name, epochs):
    pytest.importorskip("sklearn")
    eager, want, _ = _run(monkeypatch, name, epochs, captured=False)
    got, have, lines = _run(monkeypatch, name, epochs, captured=True)
    assert eager["captured"] is False and got["captured"] is True and lines == []
    assert got["replays"] >= 2 and eager["replays"] == 0
    assert got["value"] == eager["value"] and got["steps"] == eager["steps"]
    for k in want:
        assert np.array_equal(have[k], want[k]), k


def test_a_refused_step_runs_eagerly_with_the_eager_bits():
    r = recipes.RECIPES["matrix_factorization"]
    params, lines = [], []
    for captured in (False, True):
        task = r.setup(0)
        step = RecipeStep(task, train._optimizer(r, task.model.parameters(), r.lr),
                          captured, lines.append)
        with tilepy.backend("interp"):
            losses = [step(np.arange(k, 64 + k)).item() for k in range(5)]
        params.append((losses, task.model.state_dict()))
    assert step.eager_reason is not None and len(lines) == 1
    assert lines[0].startswith("training step runs eagerly (not captured): ")
    assert "kernel 'embedding" in lines[0] and "made anew on the host" in lines[0]
    assert params[0][0] == params[1][0]
    for k in params[0][1]:
        assert np.array_equal(params[0][1][k], params[1][1][k]), k
