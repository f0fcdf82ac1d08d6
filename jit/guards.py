"""Guarded loops as narrower ranges: `for v in [a, b): if v >= e: body` runs `body` for v in
[max(a, e), b) without testing v on every iteration, a test that kept LLVM from vectorising
kernels' ragged-edge masks (softmax's `if j >= N: x[i, j] = -inf`). `narrowed(loop)` gives
the range where the same iterations then run the same body in the same order.
"""

from __future__ import annotations

from tilepy.ir.expr import Call, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, If

# v CMP e  ->  (lower bound of v, upper bound of v), as format strings in e
_BOUNDS = {Op.GE: ("{e}", None), Op.GT: ("{e} + 1", None),
           Op.LT: (None, "{e}"), Op.LE: (None, "{e} + 1")}
_FLIP = {Op.GE: Op.LE, Op.GT: Op.LT, Op.LT: Op.GT, Op.LE: Op.GE}  # e CMP v == v FLIP e


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
        return [(_FLIP[cond.op], a)]
    return None


def narrowed(loop: For, expr) -> tuple[str, str, tuple] | None:
    """(start, stop, body) of the loop with its guard folded into the range, or None.
    `expr` turns an IR expression into generated source (the emitter's).

    The range is given only when all of these hold, so the same iterations run the same
    body in the same order:
    - the loop steps by 1 and its whole body is one `if` without `else`;
    - the condition is a comparison (`<`, `<=`, `>`, `>=`) of the loop variable itself with
      an integer expression, or an `and` of such comparisons;
    - that expression has no loads and does not mention the loop variable, so its value is
      the same on every iteration (the loop body cannot change a variable bound outside).
    The comparisons are of integers in their own dtype, with no arithmetic on the loop
    variable, so nothing can wrap; the bounds are computed in int64."""
    body = loop.body
    if (not (isinstance(loop.step, Const) and int(loop.step.value) == 1)
            or len(body) != 1 or not isinstance(body[0], If) or body[0].else_body):
        return None
    terms = _terms(body[0].cond, loop.var.name)
    if not terms:
        return None
    lo, hi = [f"np.int64({expr(loop.start)})"], [f"np.int64({expr(loop.stop)})"]
    for op, e in terms:
        low, high = _BOUNDS[op]
        src = f"np.int64({expr(e)})"
        if low:
            lo.append(low.format(e=src))
        if high:
            hi.append(high.format(e=src))
    start = lo[0] if len(lo) == 1 else f"max({', '.join(lo)})"
    stop = hi[0] if len(hi) == 1 else f"min({', '.join(hi)})"
    return start, stop, body[0].then_body
