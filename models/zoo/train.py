"""Train a zoo model by its recipe (tilepy.models.zoo.recipes: data, optimiser, epochs,
batch size, metric and the stated figure) and report what it reached:
`python -m tilepy.models.zoo.train --model NAME` (`--list` shows every recipe; `lstm`
is lstm_classifier). Seeded; needs the `data` extra for scikit-learn's data sets and
`train` (tqdm) for the progress bar. `--val-fraction F` holds out a seeded fraction of the
training samples: their loss is reported after every epoch, and the epoch with the lowest
is the one evaluated on the test set. The training step is captured and replayed
(tilepy.models.capture, the eager run's bits) unless `--eager` or the capture refuses it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilepy.models import no_grad, optim
from tilepy.models.errors import model_error
from tilepy.models.zoo import digits
from tilepy.models.zoo.recipe_step import RecipeStep
from tilepy.models.zoo.recipes import RECIPES, Recipe

ALIASES = {"lstm": "lstm_classifier"}


def _optimizer(recipe: Recipe, params, lr: float, precision: str = "fp32"):
    """The recipe's optimiser; with precision "bf16"/"fp16" the parameters are narrowed and
    it trains float32 masters (optim.MixedPrecision, dynamic loss scaling)."""
    cls, kw = ((optim.SGD, {"momentum": 0.9}) if recipe.optimizer == "sgd" else
               (optim.AdamW, {"weight_decay": recipe.weight_decay}))
    if precision == "fp32":
        return cls(params, lr=lr, **kw)
    return optim.MixedPrecision(params, cls, policy=precision, lr=lr, **kw)


def _batches(recipe: Recipe, rows: np.ndarray, epochs: int, rng) -> list[list[np.ndarray]]:
    """Each epoch's batches of training rows (a seeded shuffle per epoch)."""
    if recipe.batch is None:  # full batch: one step an epoch
        return [[rows]] * epochs
    out = []
    for _ in range(epochs):
        order = rows[rng.permutation(len(rows))]
        out.append([order[i:i + recipe.batch] for i in range(0, len(rows), recipe.batch)])
    return out


def split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of n: a seeded shuffle, the first
    round(val_fraction * n) rows (at least one) held out for validation."""
    if not 0.0 <= val_fraction < 1.0:
        raise model_error(f"val_fraction must be in [0, 1); got {val_fraction}")
    if val_fraction == 0.0:
        return np.arange(n), np.arange(0)
    k = max(1, round(val_fraction * n))
    if k >= n:
        raise model_error(f"val_fraction={val_fraction} of {n} training samples leaves none "
                          "to train on", hint="use a smaller fraction")
    order = np.random.default_rng([seed, 1]).permutation(n)
    return np.sort(order[k:]), np.sort(order[:k])


def _val_loss(task, rows: np.ndarray, batch: int | None) -> float:
    """The mean loss over the validation rows (eval mode, no graph), weighted by size."""
    step = batch or len(rows)
    task.model.eval()
    with no_grad():
        total = sum(task.loss(*task.batch(rows[i:i + step])).item() * len(rows[i:i + step])
                    for i in range(0, len(rows), step))
    task.model.train()
    return total / len(rows)


class _Quiet:
    """A progress bar that shows nothing (no tqdm needed)."""

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw) -> None:
        pass

    def close(self) -> None:
        pass


def _epoch(step, batches, bar) -> tuple[list[float], float]:
    """One epoch's steps: their losses and the seconds spent in them."""
    losses, spent = [], 0.0
    for idx in batches:
        t0 = time.perf_counter()
        loss = step(idx)
        spent += time.perf_counter() - t0
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    return losses, spent


def train(name: str, epochs: int | None = None, seed: int = 0, progress: bool = True,
          val_fraction: float = 0.0, log=print, precision: str = "fp32",
          captured: bool = True) -> dict:
    """Run `name`'s recipe; returns the metric, the target, whether it was met, the steps,
    seconds in steps (and in all, setup and evaluation included) and reference figures.
    With val_fraction, also each epoch's train and validation loss (`epochs`, reported
    through `log`) and the best epoch, whose parameters are restored before the test.
    precision "bf16" (or "fp16") trains the model's parameters in that format on float32
    master weights (docs/training.md, "bf16 autograd"). `captured` replays the step
    (tilepy.models.capture); a step the capture refuses runs eagerly, said through `log`."""
    t_all = time.perf_counter()
    recipe = RECIPES[ALIASES.get(name, name)]
    task = recipe.setup(seed)
    rows, val = split(task.n_train, val_fraction, seed)
    opt = _optimizer(recipe, task.model.parameters(), recipe.lr, precision)
    step = RecipeStep(task, opt, captured, log)
    plan = _batches(recipe, rows, recipe.epochs if epochs is None else epochs,
                    np.random.default_rng(seed))
    steps = sum(map(len, plan))
    bar = digits._bar(steps, True, name) if progress else _Quiet()
    spent, history, best = 0.0, [], None
    for e, batches in enumerate(plan, 1):
        losses, seconds = _epoch(step, batches, bar)
        spent += seconds
        if len(val):
            history.append({"epoch": e, "train_loss": float(np.mean(losses)),
                            "val_loss": _val_loss(task, val, recipe.batch)})
            getattr(bar, "write", log)(f"epoch {e}: train loss {history[-1]['train_loss']:.4f}"
                                       f", validation loss {history[-1]['val_loss']:.4f}")
            if best is None or history[-1]["val_loss"] < best[0]["val_loss"]:
                best = (history[-1], {k: np.array(v, copy=True)
                                      for k, v in task.model.state_dict().items()})
    bar.close()
    chosen = {}
    if best is not None:
        task.model.load_state_dict(best[1])
        chosen = {"best_epoch": best[0]["epoch"], "val_loss": best[0]["val_loss"],
                  "val_samples": len(val), "epochs": history}
    value = task.evaluate()
    met = value <= recipe.target if recipe.lower else value >= recipe.target
    return {"model": name, "metric": recipe.metric, "value": value, "target": recipe.target,
            "met": met, "steps": steps, "seconds": spent, "precision": precision,
            "captured": step.eager_reason is None, "replays": step.replays,
            "wall": time.perf_counter() - t_all, **chosen, **task.extra}


def _report(r: dict, lower: bool) -> str:
    sign = "<=" if lower else ">="
    extra = "".join(f"; {k} {v:.4f}" for k, v in r.items() if k not in (
        "model", "metric", "value", "target", "met", "steps", "seconds", "wall",
        "best_epoch", "val_samples", "epochs", "precision", "captured", "replays"))
    if r.get("precision", "fp32") != "fp32":
        extra += f"; {r['precision']} parameters, float32 masters"
    if "best_epoch" in r:
        extra += f"; best epoch {r['best_epoch']} of {len(r['epochs'])} ({r['val_samples']} " \
                 "validation samples)"
    return (f"{r['model']}: {r['metric']} {r['value']:.4f} (target {sign} {r['target']}: "
            f"{'met' if r['met'] else 'NOT met'}){extra}; {r['steps']} steps, "
            f"{r['steps'] / max(r['seconds'], 1e-9):.1f} steps/s, {r['wall']:.1f} s in all")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(RECIPES) + sorted(ALIASES),
                    default="lstm_classifier")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print every recipe and exit")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--val-fraction", type=float, default=0.0,
                    help="hold out this fraction of the training set (seeded) for "
                         "validation; the best epoch's parameters are tested")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="parameters, activations and gradients in this format, float32 "
                         "master weights")
    ap.add_argument("--eager", action="store_true",
                    help="run every step eagerly (no capture and replay)")
    args = ap.parse_args(argv)
    if args.list:
        for k, r in sorted(RECIPES.items()):
            print(f"{k}: {r.data}; {r.optimizer} lr {r.lr}, {r.epochs} epochs, batch "
                  f"{r.batch or 'full'}; {r.metric} {'<=' if r.lower else '>='} {r.target}")
        return 0
    r = train(args.model, args.epochs, args.seed, not args.no_progress, args.val_fraction,
              precision=args.precision, captured=not args.eager)
    print(_report(r, RECIPES[ALIASES.get(args.model, args.model)].lower))
    return 0 if r["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
