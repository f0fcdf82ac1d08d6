"""Training logs and plots: a History as CSV (one row per epoch) or JSON (steps and
epochs), written atomically; the loss curve as an image with matplotlib (the `viz`
extra, imported only when a plot is asked for).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile

from tilepy.models.training.errors import TrainingError, user_loc


def _write_atomic(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(os.path.abspath(path)))
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def write_log(path, history) -> None:
    """Write `history` to `path`: .csv gives the epochs' table, .json steps and epochs."""
    path = os.fspath(path)
    if path.endswith(".json"):
        _write_atomic(path, json.dumps({"steps": history.steps, "epochs": history.epochs},
                                       indent=1))
        return
    if not path.endswith(".csv"):
        raise TrainingError(f"log file {path} must end in .csv or .json", user_loc())
    fields = []
    for rec in history.epochs:
        fields += [k for k in rec if k not in fields]
    out = io.StringIO()
    w = csv.DictWriter(out, fields)
    w.writeheader()
    w.writerows(history.epochs)
    _write_atomic(path, out.getvalue())


def plot_history(history, path) -> None:
    """Save the loss curve (training loss per step, validation loss per epoch) to `path`
    (any image format matplotlib writes, chosen by the extension)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise TrainingError("plotting needs matplotlib, which is not installed", user_loc(),
                            hint="pip install 'tilepy-runtime[viz]'") from None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([s["step"] for s in history.steps], history.losses, lw=0.8, label="train loss")
    val = [(r["epoch"], r["val_loss"]) for r in history.epochs if "val_loss" in r]
    if val and history.steps:
        per_epoch = {s["epoch"]: s["step"] for s in history.steps}
        ax.plot([per_epoch.get(e, 0) for e, _ in val], [v for _, v in val], "o-",
                label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    plt.close(fig)
