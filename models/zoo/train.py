"""Train a zoo model by its recipe (tilepy.models.zoo.recipes: data, optimiser, epochs,
batch size, metric and the stated figure) and report what it reached:
`python -m tilepy.models.zoo.train --model NAME` (`--list` shows every recipe; `lstm`
is lstm_classifier). Seeded; needs the `data` extra for scikit-learn's data sets and
`train` (tqdm) for the progress bar.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilepy.models import optim
from tilepy.models.zoo import digits
from tilepy.models.zoo.recipes import RECIPES, Recipe

ALIASES = {"lstm": "lstm_classifier"}


def _optimizer(recipe: Recipe, params, lr: float):
    if recipe.optimizer == "sgd":
        return optim.SGD(params, lr=lr, momentum=0.9)
    return optim.AdamW(params, lr=lr, weight_decay=recipe.weight_decay)


def _batches(recipe: Recipe, n: int, epochs: int, rng) -> list[np.ndarray]:
    if recipe.batch is None:  # full batch: one step an epoch
        return [np.arange(n)] * epochs
    out = []
    for _ in range(epochs):
        order = rng.permutation(n)
        out += [order[i:i + recipe.batch] for i in range(0, n, recipe.batch)]
    return out


class _Quiet:
    """A progress bar that shows nothing (no tqdm needed)."""

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw) -> None:
        pass

    def close(self) -> None:
        pass


def train(name: str, epochs: int | None = None, seed: int = 0, progress: bool = True) -> dict:
    """Run `name`'s recipe; returns the metric, the target, whether it was met, the steps,
    seconds in steps (and in all, setup and evaluation included) and reference figures."""
    t_all = time.perf_counter()
    recipe = RECIPES[ALIASES.get(name, name)]
    task = recipe.setup(seed)
    opt = _optimizer(recipe, task.model.parameters(), recipe.lr)
    batches = _batches(recipe, task.n_train, recipe.epochs if epochs is None else epochs,
                       np.random.default_rng(seed))
    bar = digits._bar(len(batches), True, name) if progress else _Quiet()
    spent = 0.0
    for idx in batches:
        t0 = time.perf_counter()
        loss = task.loss(idx)
        task.model.zero_grad()
        loss.backward()
        opt.step()
        spent += time.perf_counter() - t0
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    value = task.evaluate()
    met = value <= recipe.target if recipe.lower else value >= recipe.target
    return {"model": name, "metric": recipe.metric, "value": value, "target": recipe.target,
            "met": met, "steps": len(batches), "seconds": spent,
            "wall": time.perf_counter() - t_all, **task.extra}


def _report(r: dict, lower: bool) -> str:
    sign = "<=" if lower else ">="
    extra = "".join(f"; {k} {v:.4f}" for k, v in r.items() if k not in (
        "model", "metric", "value", "target", "met", "steps", "seconds", "wall"))
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
    args = ap.parse_args(argv)
    if args.list:
        for k, r in sorted(RECIPES.items()):
            print(f"{k}: {r.data}; {r.optimizer} lr {r.lr}, {r.epochs} epochs, batch "
                  f"{r.batch or 'full'}; {r.metric} {'<=' if r.lower else '>='} {r.target}")
        return 0
    r = train(args.model, args.epochs, args.seed, not args.no_progress)
    print(_report(r, RECIPES[ALIASES.get(args.model, args.model)].lower))
    return 0 if r["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
