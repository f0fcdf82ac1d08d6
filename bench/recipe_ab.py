"""Eager against captured steps of the zoo's recipes (tilepy.models.zoo.train): per-step
CPU time of this process over the recipe's own batches, alternating rounds in one
process, the minimum of each. Run it on one thread:

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/recipe_ab.py \\
        --model mlp [--rounds 7] [--steps 20]

Each side trains its own copy of the model (same seed) on the same batches. Not a test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilepy.models.zoo import train
from tilepy.models.zoo.recipe_step import RecipeStep
from tilepy.models.zoo.recipes import RECIPES


def make(name: str, captured: bool) -> RecipeStep:
    recipe = RECIPES[name]
    task = recipe.setup(0)
    return RecipeStep(task, train._optimizer(recipe, task.model.parameters(), recipe.lr),
                      captured)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(RECIPES), default="mlp")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    steps = {"eager": make(args.model, False), "captured": make(args.model, True)}
    n_train, batch = steps["eager"].task.n_train, RECIPES[args.model].batch
    rng = np.random.default_rng(0)
    idx = [rng.permutation(n_train)[:batch] if batch else np.arange(n_train)
           for _ in range(args.steps)]
    best = dict.fromkeys(steps, float("inf"))
    for step in steps.values():
        for i in idx[:5]:
            step(i).item()
    for _ in range(args.rounds):
        for name, step in steps.items():
            c0 = time.process_time()
            for i in idx:
                step(i).item()
            best[name] = min(best[name], (time.process_time() - c0) / len(idx))
    cap = steps["captured"]
    print(f"{args.model}: " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in best.items())
          + f" ms/step CPU ({1 / best['eager']:.0f} -> {1 / best['captured']:.0f} steps/s, "
          f"{best['captured'] / best['eager'] - 1:+.0%}; min of {args.rounds} rounds of "
          f"{len(idx)}; {cap.replays} replays{'' if cap.run else '; ' + cap.eager_reason})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
