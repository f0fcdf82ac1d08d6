"""Config spaces and search orders: expanding `configs` (a list of dicts, a dict of lists
for a grid, or a callable giving either), and choosing which configs to measure: all of them
(grid), a seeded sample (random) or the best-predicted ones (model, see `predict`).
"""

from __future__ import annotations

import itertools
import json
import math
import random

from tilepy.errors import TuneError

SEARCHES = ("grid", "random", "model")
# seconds of fixed cost per launched block, by backend: the interpreter runs numpy calls per
# tile statement, the JIT a loop iteration of a prange (orders of magnitude, not fits)
BLOCK_COST = {"interp": 2e-4, "py": 5e-4, "jit": 1e-6}


def expand(configs, *args, **kwargs) -> list[dict]:
    """The configs as a list of dicts (a dict of lists is the grid of its product)."""
    got = configs(*args, **kwargs) if callable(configs) else configs
    if isinstance(got, dict):
        names = list(got)
        values = [v if isinstance(v, (list, tuple, range)) else [v] for v in got.values()]
        got = [dict(zip(names, combo)) for combo in itertools.product(*values)]
    try:
        out = [dict(c) for c in got]
    except (TypeError, ValueError):
        raise TuneError(f"configs must be a list of dicts or a dict of lists; got "
                        f"{type(got).__name__}", hint='e.g. configs={"block_M": [32, 64], '
                        '"block_N": [32, 64]}') from None
    if not out:
        raise TuneError("configs is empty: there is nothing to tune",
                        hint="give at least one config (a dict of the factory's arguments)")
    return out


def label(config: dict) -> str:
    """A config's stable text (its JSON, keys sorted): names it in caches and messages."""
    return json.dumps(config, sort_keys=True, default=str)


def choose(configs: list[dict], search: str, budget: int | None, seed: int,
           predict=None) -> list[dict]:
    """The configs to measure, in order. `predict(config)` (seconds) ranks them for the
    model search; a budget caps random and model searches (grid ignores none: it caps too)."""
    if search not in SEARCHES:
        raise TuneError(f"search must be one of {', '.join(SEARCHES)}; got {search!r}")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise TuneError(f"budget must be a positive int; got {budget!r}")
    n = len(configs) if budget is None else min(budget, len(configs))
    if search == "grid":
        return configs[:n]
    if search == "random":
        return random.Random(seed).sample(configs, n)
    ranked = sorted(configs, key=lambda c: _finite(predict(c)))
    return ranked[:n]


def _finite(x: float) -> float:
    return x if x is not None and math.isfinite(x) else math.inf


def predict(func, sizes: dict, roof, backend: str) -> float:
    """The cost model: seconds = max(flops at peak, global bytes at peak bandwidth) plus a
    fixed cost per block. The IR's counts (ir/analysis) include edge tiles in full, so
    padding waste and the re-reads of small tiles both show; nothing else is modelled."""
    from tilepy.ir.analysis import count

    c = count(func, sizes)
    work = max(c.flops / (roof.gflops * 1e9), c.global_bytes / (roof.gbs * 1e9))
    return work + blocks(func, sizes) * BLOCK_COST.get(backend, BLOCK_COST["jit"])


def blocks(func, sizes: dict) -> int:
    """The number of blocks the kernel's launches run at these sizes."""
    from tilepy.ir.stmt import Launch
    from tilepy.kernel import eval_index

    total = 0
    for s in func.body:
        if isinstance(s, Launch):
            total += math.prod(eval_index(g, sizes) for g in s.grid)
    return total
