"""`for bx, by in T.Persistent(domain, wave_size, index, group_size)`: TileLang's persistent
tile loop. Block `index` of a grid of `wave_size` blocks visits tiles index, index +
wave_size, ... of the domain, in waves; every tile is visited once by one block. Tiles are
numbered row-major; TileLang's grouped numbering differs only in which block computes which
tile, which no result depends on (blocks are independent). Emits a serial loop and a guard.
"""

from __future__ import annotations

import ast

from tilepy.errors import Loc, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.builtins import Args
from tilepy.ir import stmt as S
from tilepy.ir.expr import Const, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import int32


def _product(sizes: list, loc: Loc):
    total = sizes[0]
    for s in sizes[1:]:
        total = exprs.call(Op.MUL, [total, s], loc)
    return total


def _coordinates(tile, domain: list, loc: Loc) -> list:
    """Row-major coordinates of tile number `tile` in `domain`."""
    coords, rest = [], tile
    for size in reversed(domain[1:]):
        coords.append(exprs.call(Op.MOD, [rest, size], loc))
        rest = exprs.call(Op.FLOORDIV, [rest, size], loc)
    return [rest] + coords[::-1]


def persistent_loop(tr, node: ast.For, loc: Loc) -> None:
    a = Args(tr, node.iter, ["domain", "wave_size", "index", "group_size"], loc,
             "T.Persistent")
    domain = a.value("domain")
    if exprs.is_ir(domain) or not isinstance(domain, (list, tuple)) or not domain:
        raise TileTypeError("T.Persistent: expected a list of tile counts as its domain",
                            loc)
    domain = [exprs.index_expr(d, loc) for d in domain]
    wave = exprs.index_expr(a.value("wave_size"), loc)
    index = exprs.index_expr(a.value("index"), loc)
    names = tr.target_names(node.target, len(domain), loc)
    if len(names) != len(domain):
        raise TileTypeError(f"T.Persistent has {len(domain)} dimensions but "
                            f"{len(names)} loop variables", loc)
    total = _product(domain, loc)
    w = Var(tr.unique("wave"), int32)
    tile = exprs.call(Op.ADD, [exprs.call(Op.MUL, [w, wave], loc), index], loc)
    tr.scopes.append({})
    for name, coord in zip(names, _coordinates(tile, domain, loc)):
        tr.bind(name, coord)
    try:
        body = tr.block(node.body, loop=True, where=loc)
    finally:
        tr.close_scope("loop", loc)
    inside = exprs.as_bool(exprs.call(Op.LT, [tile, total], loc), loc)
    waves = exprs.index_expr(exprs.call(Op.FLOORDIV, [
        exprs.call(Op.ADD, [total, exprs.call(Op.SUB, [wave, 1], loc)], loc), wave], loc), loc)
    tr.emit(S.For(w, Const(0, int32), waves, Const(1, int32), S.ForKind.SERIAL,
                  (S.If(inside, body, (), loc=loc),), loc=loc))
