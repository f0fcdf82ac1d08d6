"""Warp and block votes in a fissioned launch (frontend/fission.py): every thread stored its
predicate (0/1) and, for a warp vote, its lane mask in shared buffers before the split; after
it each thread folds its warp's (or block's) predicates in lane order. CUDA's rules: a warp
vote counts the lanes of the caller's warp that its mask names and that exist in the block;
`ballot` sets bit k for lane k; `any` / `all` give 1 or 0. A block vote counts every thread.
"""

from __future__ import annotations

from tilepy.frontend import exprs
from tilepy.frontend.simt import WARP, Vote
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import dtype as dtype_of
from tilepy.ir.types import int32, int64


def lower(fx, s: Vote, preds: Buffer, masks: Buffer | None) -> list:
    """The statements after the split that give each thread the vote's value."""
    c = (lambda op, *a: exprs.call(op, list(a), s.loc))
    lin, n, loc = fx.lin, fx.n, s.loc
    k = Var(fx.tr.unique("k"), int32)
    acc = fx.exchange("vacc", int64 if s.mask is not None else int32)
    if s.mask is None:  # block votes: how many threads' predicates hold
        add = c(Op.ADD, Load(acc, (lin,)), exprs.cast(Load(preds, (k,)), int32, loc))
        fold = S.Store(acc, (lin,), add, loc=loc)
        total = Load(acc, (lin,))
        value = {"count": total, "and": c(Op.EQ, total, n), "or": c(Op.NE, total, 0)}[s.kind]
        trips = n
    else:
        base = c(Op.SUB, lin, c(Op.BITAND, lin, WARP - 1))
        src = c(Op.ADD, base, k)
        k64 = exprs.cast(k, int64, loc)
        named = c(Op.NE, c(Op.BITAND, c(Op.SHR, Load(masks, (lin,)), k64), Const(1, int64)), 0)
        held = c(Op.NE, Load(preds, (c(Op.MIN, src, n - 1),)), 0)
        on = c(Op.AND, c(Op.AND, c(Op.LT, src, n), named), held)
        bit = c(Op.SELECT, on, c(Op.SHL, Const(1, int64), k64), Const(0, int64))
        fold = S.Store(acc, (lin,), c(Op.BITOR, Load(acc, (lin,)), bit), loc=loc)
        value = _warp_value(s, c, Load(acc, (lin,)), Load(masks, (lin,)), base, n)
        trips = WARP
    return [S.Store(acc, (lin,), Const(0, acc.dtype), loc=loc),
            S.For(k, Const(0, int32), Const(trips, int32), Const(1, int32), S.ForKind.SERIAL,
                  (fold,), loc=loc),
            S.Store(s.result, (), exprs.cast(value, s.result.dtype, loc), loc=loc)]


def _warp_value(s: Vote, c, bits, mask, base, n: int):
    if s.kind == "ballot":
        return exprs.cast(bits, dtype_of("uint64"), s.loc)
    if s.kind == "any":
        return c(Op.NE, bits, Const(0, int64))
    lanes = exprs.cast(c(Op.MIN, c(Op.SUB, n, base), WARP), int64, s.loc)
    exist = c(Op.SUB, c(Op.SHL, Const(1, int64), lanes), Const(1, int64))
    return c(Op.EQ, bits, c(Op.BITAND, mask, exist))
