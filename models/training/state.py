"""Training checkpoints: model, optimiser, schedule, loader position and step in one file
(checkpoint.py's format), and their restoration into fresh objects so training resumes
with the same bits. A checkpoint of another model is refused before anything changes.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.training.checkpoint import load, save
from tilepy.models.training.errors import CheckpointError, user_loc


def save_checkpoint(path, model, optimizer=None, scheduler=None, loader=None, step: int = 0,
                    extra: dict | None = None) -> None:
    """Write everything needed to continue training (atomically; no pickle)."""
    state = {"kind": "training", "model_class": type(model).__name__,
             "model": dict(model.state_dict()), "step": int(step), "extra": extra or {}}
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)):
        if obj is not None:
            state[name] = obj.state_dict()
    save(state, path)


def _check_model(path, saved: dict, model) -> None:
    """Refuse a checkpoint whose parameter names or shapes differ from `model`'s."""
    own = {k: np.shape(v) for k, v in model.state_dict().items()}
    got = {k: np.shape(v) for k, v in saved.items()}
    missing = sorted(set(own) - set(got))
    extra = sorted(set(got) - set(own))
    shapes = [f"{k}: {got[k]} in the file, {own[k]} in the model"
              for k in own if k in got and got[k] != own[k]]
    if missing or extra or shapes:
        what = "; ".join(filter(None, [
            f"missing {missing[:4]}" if missing else "",
            f"unexpected {extra[:4]}" if extra else "", "; ".join(shapes[:3])]))
        raise CheckpointError(f"{path} is a checkpoint of another model ({what})",
                              user_loc(), hint="load it into the model it was saved from")


def load_checkpoint(path, model, optimizer=None, scheduler=None, loader=None) -> dict:
    """Restore a save_checkpoint() file into these objects; returns {'step', 'extra'}."""
    state = load(path)
    if not isinstance(state, dict) or state.get("kind") != "training":
        raise CheckpointError(f"{path} holds a state dict, not a training checkpoint",
                              user_loc(), hint="read it with tilepy.models.load(path)")
    _check_model(path, state["model"], model)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)):
        if obj is not None and name not in state:
            raise CheckpointError(f"{path} has no {name} state", user_loc(),
                                  hint=f"it was saved without a {name}; pass {name}=None")
    model.load_state_dict(state["model"])
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)):
        if obj is not None:
            obj.load_state_dict(state[name])
    return {"step": state["step"], "extra": state["extra"]}
