"""The zoo's recipes capture their training step by default (`zoo.train`, `--eager` turns
it off) and give the eager run's model bit for bit; a step the capture refuses is redone
eagerly and the run goes on eagerly after one log line (interpreter: no compiles)."""

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


def _steps(name, captured, lines):
    """Five steps of the recipe on the interpreter: (losses, parameters, the step)."""
    r = recipes.RECIPES[name]
    task = r.setup(0)
    step = RecipeStep(task, train._optimizer(r, task.model.parameters(), r.lr), captured,
                      lines.append)
    with tilepy.backend("interp"):
        b = r.batch or task.n_train  # full batch: rotated each step
        losses = [step(np.arange(k, b + k) % task.n_train).item() for k in range(5)]
    return losses, task.model.state_dict(), step


# one recipe per family: the embedding ops' index sort is a host fill (embedding, embedding
# bag); the graph models' labelled rows are a host gather; the LSTM's state copies are
# recorded; the VAE's noise is drawn again on replay; an MSE loss's seed gradient is one
# array
@pytest.mark.parametrize("name", ["matrix_factorization", "dlrm", "gcn", "lstm_classifier",
                                  "vae", "autoencoder"])
def test_a_captured_step_gives_the_eager_bits(name):
    if name in ("lstm_classifier", "vae", "autoencoder"):
        pytest.importorskip("sklearn")
    lines = []
    want, got = _steps(name, False, lines), _steps(name, True, lines)
    assert want[0] == got[0]
    for k in want[1]:
        assert np.array_equal(want[1][k], got[1][k]), k
    assert got[2].eager_reason is None and got[2].replays == 2 and lines == []


def test_a_packed_sequence_step_is_refused_and_runs_eagerly_with_the_eager_bits(monkeypatch):
    # the BiLSTM tagger packs each batch by its lengths: refused, redone eagerly, logged
    r = recipes.RECIPES["bilstm_tagger"]
    monkeypatch.setitem(recipes.RECIPES, "bilstm_tagger", dataclasses.replace(r, batch=8))
    lines = []
    want, got = _steps("bilstm_tagger", False, lines), _steps("bilstm_tagger", True, lines)
    assert want[0] == got[0]
    for k in want[1]:
        assert np.array_equal(want[1][k], got[1][k]), k
    assert got[2].eager_reason is not None and got[2].replays == 0
    assert lines == ["training step runs eagerly (not captured): a captured step cannot "
                     "replay LSTM over a PackedSequence: its batch sizes, read on the host, "
                     "set the rows every step updates"]


def test_a_dynamic_loss_scaler_runs_eagerly_and_says_so():
    pytest.importorskip("sklearn")
    r, lines = recipes.RECIPES["softmax_regression"], []
    task = r.setup(0)
    opt = train._optimizer(r, task.model.parameters(), r.lr, "bf16")
    step = RecipeStep(task, opt, True, lines.append)
    assert step.run is None and lines == [
        "training step runs eagerly (not captured): the dynamic loss scaler (--precision "
        "bf16/fp16) changes its scale on the host after an overflow"]
    assert RecipeStep(task, opt, False, lines.append).eager_reason == "--eager"
    assert len(lines) == 1  # --eager is not logged
