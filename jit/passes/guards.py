"""The guards pass: `for v in [a, b): if v >= e: body` becomes `for v in [max(a, e), b): body`,
the same iterations running the same body in the same order without testing v on each one
(a test that kept LLVM from vectorising kernels' ragged-edge masks, softmax's
`if j >= N: x[i, j] = -inf`). `narrowed(loop)` gives that range as IR expressions.
"""

from __future__ import annotations

import dataclasses

from tilepy.ir.expr import Call, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, If, PrimFunc
from tilepy.ir.types import int64
from tilepy.jit.passes.rewrite import map_body, with_bodies

# v CMP e  ->  (bounds v >= e + lo, v < e + hi); None where the comparison sets no bound
_BOUNDS = {Op.GE: (0, None), Op.GT: (1, None), Op.LT: (None, 0), Op.LE: (None, 1)}
FLIP = {Op.GE: Op.LE, Op.GT: Op.LT, Op.LT: Op.GT, Op.LE: Op.GE}  # e CMP v == v FLIP e


def _free_of(e, name: str) -> bool:
    """e has no loads and does not use variable `name`."""
    if isinstance(e, Var):
        return e.name != name
    if isinstance(e, Load):
        return False
    if isinstance(e, Call):
        return all(_free_of(a, name) for a in e.args)
    return isinstance(e, Const)


def _terms(cond, name: str):
    """[(op, e)] with `v op e` for each conjunct, or None."""
    if isinstance(cond, Call) and cond.op is Op.AND:
        out = []
        for a in cond.args:
            t = _terms(a, name)
            if t is None:
                return None
            out += t
        return out
    if not (isinstance(cond, Call) and cond.op in _BOUNDS and len(cond.args) == 2):
        return None
    a, b = cond.args
    if not (a.dtype.is_int and b.dtype.is_int):
        return None
    if isinstance(a, Var) and a.name == name and _free_of(b, name):
        return [(cond.op, b)]
    if isinstance(b, Var) and b.name == name and _free_of(a, name):
        return [(FLIP[cond.op], a)]
    return None


def narrowed(loop: For) -> tuple[object, object, tuple] | None:
    """(start, stop, body) of the loop with its guard folded into the range, or None; start
    and stop are int64 IR expressions (max/min of the loop's bounds and the guard's).

    The range is given only when all of these hold, so the same iterations run the same
    body in the same order:
    - the loop steps by 1 and its whole body is one `if` without `else`;
    - the condition is a comparison (`<`, `<=`, `>`, `>=`) of the loop variable itself with
      an integer expression, or an `and` of such comparisons;
    - that expression has no loads and does not mention the loop variable, so its value is
      the same on every iteration (the loop body cannot change a variable bound outside).
    The comparisons are of integers in their own dtype, with no arithmetic on the loop
    variable, so nothing can wrap; the bounds are computed in int64 (`e + 1` included)."""
    body = loop.body
    if (not (isinstance(loop.step, Const) and int(loop.step.value) == 1)
            or len(body) != 1 or not isinstance(body[0], If) or body[0].else_body):
        return None
    terms = _terms(body[0].cond, loop.var.name)
    if not terms:
        return None
    lo, hi = [as_int64(loop.start)], [as_int64(loop.stop)]
    for op, e in terms:
        low, high = _BOUNDS[op]
        if low is not None:
            lo.append(_plus(as_int64(e), low))
        if high is not None:
            hi.append(_plus(as_int64(e), high))
    return _fold(Op.MAX, lo), _fold(Op.MIN, hi), body[0].then_body


def as_int64(e):
    """e in int64 (a cast unless it is one or a constant)."""
    if e.dtype == int64:
        return e
    if isinstance(e, Const):
        return Const(int(e.value), int64)
    return Call(Op.CAST, (e,), int64)


def _plus(e, k: int):
    if k == 0:
        return e
    if isinstance(e, Const):
        return Const(int(e.value) + k, int64)
    return Call(Op.ADD, (e, Const(k, int64)), int64)


def _fold(op: Op, xs: list):
    out = xs[0]
    for x in xs[1:]:
        out = Call(op, (out, x), int64)
    return out


def run(func: PrimFunc) -> PrimFunc:
    """The guards pass: every loop `narrowed` applies to runs its narrowed range."""
    return map_body(func, _body)


def _body(body: tuple) -> tuple:
    return tuple(_stmt(s) for s in body)


def _stmt(s):
    s = with_bodies(s, _body)
    if isinstance(s, For):
        n = narrowed(s)
        if n is not None:
            start, stop, inner = n
            return dataclasses.replace(s, start=start, stop=stop, body=inner)
    return s
