"""Scalar expression evaluation, vectorised over the blocks of a batch and T.Parallel lanes.

Owns turning an `Expr` into a compute-dtype numpy array (one value per lane) and index
expressions into the forms `access` understands. Every op goes through the op table's
`reference`; nothing here defines what an op computes.
"""

from __future__ import annotations

import numpy as np

from tilepy.interpreter import access
from tilepy.interpreter.access import Lane, Val
from tilepy.interpreter.state import Ctx
from tilepy.ir.errors import KernelRuntimeError
from tilepy.ir.expr import Call, Const, Load, Var
from tilepy.ir.ops import Op, cast_values, reference
from tilepy.ir.types import compute_dtype, float64

_CONSTS: dict[tuple, np.ndarray] = {}


def evaluate(ctx: Ctx, e, mask) -> np.ndarray:
    """The value of `e` on every lane (compute dtype of e.dtype). `mask` (None: all lanes)
    only decides which lanes' loads are checked; inactive lanes get unspecified values."""
    t = type(e)
    if t is Const:
        return const_value(e)
    if t is Var:
        return _var(ctx, e)
    if t is Load:
        forms = index_forms(ctx, e.indices, mask)
        return access.load(ctx, e.buffer, forms, mask)
    if t is Call:
        return _call(ctx, e, mask)
    raise TypeError(f"not an expression: {e!r}")


def const_value(c: Const) -> np.ndarray:
    key = (c.dtype.name, repr(c.value))
    v = _CONSTS.get(key)
    if v is None:
        if c.dtype.is_float:
            v = cast_values(np.asarray(float(c.value), dtype=np.float64), float64, c.dtype)
        else:
            v = np.asarray(c.value, dtype=compute_dtype(c.dtype))
        v = np.asarray(v).reshape(())
        v.flags.writeable = False
        _CONSTS[key] = v
    return v


def _var(ctx: Ctx, v: Var) -> np.ndarray:
    val = ctx.env.get(v.name)
    if val is None and v.name in ctx.lane_defs:  # a deferred index assignment
        val = ctx.env[v.name] = evaluate(ctx, inline(ctx, ctx.lane_defs[v.name]), None)
    if val is None:
        raise KernelRuntimeError(
            f"'{v.name}' has no value here: expected a bound scalar (a size, loop variable, "
            f"block index or earlier assignment); got an unbound name",
            loc=ctx.loc, hint=f"pass a value for '{v.name}' or assign it before this line",
        )
    return ctx.pad(val)


def and_mask(mask, c):
    """The lanes active in `mask` (None: all) where `c` is true."""
    c = np.asarray(c, dtype=bool)
    return c if mask is None else (mask & c)


def _call(ctx: Ctx, e: Call, mask) -> np.ndarray:
    op = e.op
    if op is Op.SELECT:
        c = evaluate(ctx, e.args[0], mask)
        a = evaluate(ctx, e.args[1], and_mask(mask, c))
        b = evaluate(ctx, e.args[2], and_mask(mask, ~np.asarray(c, dtype=bool)))
        args = [c, a, b]
    elif op is Op.AND or op is Op.OR:
        a = evaluate(ctx, e.args[0], mask)
        guard = a if op is Op.AND else ~np.asarray(a, dtype=bool)
        args = [a, evaluate(ctx, e.args[1], and_mask(mask, guard))]
    else:
        args = [evaluate(ctx, x, mask) for x in e.args]
    return reference(op, args, tuple(x.dtype for x in e.args), e.dtype)


# ---------------------------------------------------------------- index forms


def _split(ctx: Ctx, e):
    """The T.Parallel variable that `e` is `var + <rest>` of (one occurrence, through
    additions only), False when e mentions none that way, or None when it is not of that
    shape (e.g. the variable is scaled)."""
    if type(e) is Var:
        if e.name in ctx.lane_defs:
            return _split(ctx, ctx.lane_defs[e.name])
        return e.name if e.name in ctx.lane_vars else False
    if type(e) is Call and e.op is Op.ADD:
        a, b = _split(ctx, e.args[0]), _split(ctx, e.args[1])
        if a is None or b is None or (a and b):
            return None
        return a or b
    return None if mentions_lane(ctx, e) else False


def mentions_lane(ctx: Ctx, e) -> bool:
    t = type(e)
    if t is Var:
        return e.name in ctx.lane_vars or e.name in ctx.lane_defs
    if t is Call:
        return any(mentions_lane(ctx, a) for a in e.args)
    if t is Load:
        return any(mentions_lane(ctx, a) for a in e.indices)
    return False


def index_forms(ctx: Ctx, indices, mask) -> list:
    """Each index as `Lane` (offset + a step-1 parallel variable) or `Val`."""
    forms = []
    for e in indices:
        name = _split(ctx, e) if ctx.lane_vars else False
        lv = ctx.lane_vars.get(name) if name else None
        if lv is not None and lv.step == 1:
            saved = ctx.env[name]
            ctx.env[name] = lv.start
            try:
                off = evaluate(ctx, inline(ctx, e), mask)
            finally:
                ctx.env[name] = saved
            if off.ndim <= 1 or all(s == 1 for s in off.shape[1:]):
                forms.append(Lane(lv.axis, off, lv.n))
                continue
        forms.append(Val(_as_index(evaluate(ctx, e, mask))))
    return forms


def _as_index(v: np.ndarray) -> np.ndarray:
    if v.dtype.kind not in "iub":
        raise KernelRuntimeError(f"an index must be an integer; got {v.dtype}")
    return v


def pure_index(e) -> bool:
    """Whether `e` reads no buffer (so it can be re-evaluated later with the same value)."""
    t = type(e)
    if t is Load:
        return False
    if t is Call:
        return all(pure_index(a) for a in e.args)
    return True


def inline(ctx: Ctx, e):
    """`e` with the lane-dependent, load-free assignments inside T.Parallel replaced by
    their definitions (a new expression; the IR is never modified)."""
    t = type(e)
    if t is Var:
        d = ctx.lane_defs.get(e.name)
        return e if d is None else inline(ctx, d)
    if t is Call:
        args = tuple(inline(ctx, a) for a in e.args)
        return e if args == e.args else Call(e.op, args, e.dtype, e.loc)
    return e


_FLIP = {Op.GT: Op.LT, Op.GE: Op.LE}


def always_true(ctx: Ctx, cond) -> bool:
    """Whether `cond` is provably true on every lane: `lane_index < bound` (or <=, or
    mirrored, or an `and` of such) where the lane side is `offset + parallel var` with a
    positive step and the bound does not vary between lanes. False means "not known"."""
    if type(cond) is not Call:
        return False
    if cond.op is Op.AND:
        return all(always_true(ctx, a) for a in cond.args)
    op, (a, b) = cond.op, cond.args
    if op in _FLIP:
        op, a, b = _FLIP[op], b, a
    if op not in (Op.LT, Op.LE) or not a.dtype.is_int:
        return False
    name = _split(ctx, a)
    lv = ctx.lane_vars.get(name) if name else None
    if lv is None or lv.step <= 0 or mentions_lane(ctx, b):
        return False
    saved = ctx.env[name]
    ctx.env[name] = lv.start
    try:
        first = evaluate(ctx, inline(ctx, a), None)
    finally:
        ctx.env[name] = saved
    bound = evaluate(ctx, b, None)
    top = int(np.max(first)) + (lv.n - 1) * lv.step
    low = int(np.min(bound))
    return top < low if op is Op.LT else top <= low
