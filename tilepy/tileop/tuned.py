"""Tuning a tile op's tile sizes (`@tile_op(tune=True)` or `tune={...}`): the cost model's
tiles and their neighbours (each tiled index halved or doubled, one at a time), or the
user's grid, measured on the call's arrays by tilepy's tuner (tilepy/tuning), the fastest
kept per shapes, dtypes and backend and cached in the tuning cache like any tuned kernel.
Tile sizes change only the time: a tile op's reductions follow the contract's order
whatever the tiles, so in exact mode every config gives the same bits.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect

from tilepy.kernel import Kernel

MAX_TILE = 1024


def user_name(body, name: str) -> str:
    """The name `tiles=` uses for an internal index name (a reduction's: its own name)."""
    red = next((r for r in body.reds if r.var.name == name), None)
    return red.name if red else name


def neighbours(op) -> list[dict]:
    """The model's tiles ({}: no change) and, per index tiled above 1 that the user did not
    fix, that tile halved and doubled (within 1..1024), one index at a time."""
    out: list[dict] = [{}]
    for name, t in op.tiles.items():
        user = user_name(op.body, name)
        if t <= 1 or user in op.user_tiles:
            continue
        for v in (t // 2, t * 2):
            if 1 <= v <= MAX_TILE:
                out.append({user: v})
    return out


def build(op, config: dict) -> Kernel:
    """The op's kernel with the config's tiles over the user's and the model's."""
    return op.kernel_with(config)


def ident(op) -> str:
    """The op's identity in the tuning key: its module, name, source and options."""
    fn = op.fn
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = ""
    parts = (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""), text,
             sorted(op.user_tiles.items()), repr(op.tune_configs))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def tuned(op, args):
    """The TuneResult for these arrays (tuned once per shapes, dtypes and backend)."""
    from tilepy.tuning import space
    from tilepy.tuning.tuner import tune

    backend = importlib.import_module("tilepy.backend").current()
    sig = (tuple((getattr(a, "shape", None), str(getattr(a, "dtype", type(a))))
                 for a in args), backend[0], tuple(sorted(backend[1].items())))
    if sig not in op._tuned:
        configs = neighbours(op) if op.tune_configs is True else \
            space.expand(op.tune_configs)
        op._tuned[sig] = tune(lambda c: build(op, c), configs, args, ident=ident(op))
    return op._tuned[sig]
