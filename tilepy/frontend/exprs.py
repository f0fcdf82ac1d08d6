"""Building typed IR expressions from front-end values: literals, promotion, op calls.

Arithmetic on two build-time values (int, float, bool, Format...) happens in Python; any
that touches an IR expression becomes a `Call` typed by the op table, with explicit casts
where operand dtypes differ. Only the op table decides what an op computes.
"""

from __future__ import annotations

import numpy as np

from tilepy.errors import Loc, TileTypeError
from tilepy.frontend.values import describe
from tilepy.ir import types
from tilepy.ir.expr import Call, Const, Expr, Load, Var
from tilepy.ir.ops import CASTS, Op, result_dtype
from tilepy.ir.types import DType
from tilepy.precision import rounding

IR_EXPR = (Const, Var, Load, Call)


def is_ir(v: object) -> bool:
    return isinstance(v, IR_EXPR)


def is_py_scalar(v: object) -> bool:
    return isinstance(v, (bool, int, float, np.integer, np.floating, np.bool_))


def make_const(value, dt: DType, loc: Loc) -> Const:
    """A literal of dtype `dt`: floats rounded once to `dt`, integers range-checked."""
    if dt.is_float:
        v = float(rounding.cast(np.asarray([float(value)], dtype=np.float64), dt.name)[0])
        return Const(v, dt)
    if dt.is_bool:
        return Const(bool(value), dt)
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise TileTypeError(f"the literal {value} is not an integer, but {dt} is expected", loc)
    iv = int(value)
    if not (dt.min_value <= iv <= dt.max_finite):
        raise TileTypeError(f"the literal {iv} does not fit {dt}", loc,
                            hint="cast explicitly, e.g. T.cast(x, 'int64')")
    return Const(iv, dt)


def literal_dtype(value) -> DType:
    """The dtype a literal standing alone takes: bool, int32, or float32 (as TileLang)."""
    if isinstance(value, (bool, np.bool_)):
        return types.bool_
    if isinstance(value, (int, np.integer)):
        return types.int32
    return types.float32


def to_ir(v, loc: Loc, like: DType | None = None) -> Expr:
    """A front-end scalar value as an IR expression (literals take `like`'s dtype)."""
    if is_ir(v):
        return v
    if is_py_scalar(v):
        dt = like if like is not None else literal_dtype(v)
        if isinstance(v, (float, np.floating)) and not dt.is_float:
            dt = types.float32
        return make_const(v, dt, loc)
    raise TileTypeError(f"expected a scalar value here; got {describe(v)}", loc)


def cast(e: Expr, dt: DType, loc: Loc, op: Op = Op.CAST) -> Expr:
    if e.dtype == dt and op is Op.CAST:
        return e
    if isinstance(e, Const) and op is Op.CAST:
        try:
            return make_const(e.value, dt, loc)
        except TileTypeError:
            pass
    return Call(op, (e,), dt, loc)


def unify(a, b, loc: Loc) -> tuple[Expr, Expr]:
    """Two operands converted to one dtype (literals adapt to the typed side)."""
    if not is_ir(a) and not is_ir(b):
        a = to_ir(a, loc)
    if not is_ir(a):
        a = to_ir(a, loc, like=b.dtype)
    if not is_ir(b):
        b = to_ir(b, loc, like=a.dtype)
    if a.dtype != b.dtype:
        dt = types.promote(a.dtype, b.dtype)
        a, b = cast(a, dt, loc), cast(b, dt, loc)
    return a, b


_BOOL_BITWISE = {Op.BITAND: Op.AND, Op.BITOR: Op.OR, Op.BITXOR: Op.NE}


def call(op: Op, args: list, loc: Loc) -> Expr:
    """`op(*args)` typed by the op table; binary operands are unified first."""
    if op in CASTS:
        raise AssertionError("use cast() for conversions")
    if len(args) == 2:
        a, b = unify(args[0], args[1], loc)
        irargs: tuple[Expr, ...] = (a, b)
        if op in _BOOL_BITWISE and a.dtype.is_bool and b.dtype.is_bool:
            op = _BOOL_BITWISE[op]  # TVM's `m & (j < n)` on bools: the logical operator
    elif len(args) == 3:  # select(cond, a, b)
        a, b = unify(args[1], args[2], loc)
        irargs = (to_ir(args[0], loc, like=types.bool_), a, b)
    else:
        irargs = tuple(to_ir(x, loc) for x in args)
    try:
        dt = result_dtype(op, tuple(x.dtype for x in irargs))
    except TileTypeError as err:
        raise TileTypeError(err.message, loc, hint=err.hint) from None
    return Call(op, irargs, dt, loc)


def as_bool(v, loc: Loc) -> Expr:
    """A condition: bool expressions as they are; numbers compared with zero."""
    e = to_ir(v, loc)
    if e.dtype.is_bool:
        return e
    return call(Op.NE, [e, 0], loc)


def simplify_sub(b: Expr, a: Expr, loc: Loc) -> Expr:
    """b - a, folding the common `x + c - x` of slice bounds to `c`."""
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(b.value - a.value, b.dtype)
    if isinstance(b, Call) and b.op is Op.ADD:
        x, c = b.args
        if x == a:
            return c
        if c == a:
            return x
    if a == b:
        return Const(0, a.dtype)
    la, lb = _linear(a), _linear(b)
    if la is not None and lb is not None:  # `(bx + 1) * m - bx * m` is m
        diff = dict(lb)
        for k, v in la.items():
            diff[k] = diff.get(k, 0) - v
        if all(v == 0 for k, v in diff.items() if k is not None):
            return Const(diff.get(None, 0), b.dtype)
    return call(Op.SUB, [b, a], loc)


def _linear(e: Expr) -> dict | None:
    """e as {term: integer coefficient} (None: the constant term) when it is a sum of
    integer constants times terms; None when it is not (a product of two terms...)."""
    if isinstance(e, Const):
        return {None: int(e.value)} if e.dtype.is_int else None
    if not isinstance(e, Call) or e.op not in (Op.ADD, Op.SUB, Op.MUL, Op.NEG):
        return {e: 1}
    parts = [_linear(x) for x in e.args]
    if any(p is None for p in parts):
        return None
    if e.op is Op.NEG:
        return {k: -v for k, v in parts[0].items()}
    if e.op is Op.MUL:
        const = [p for p in parts if set(p) == {None}]
        if not const:
            return {e: 1}
        k = const[0][None]
        other = parts[1] if const[0] is parts[0] else parts[0]
        return {t: v * k for t, v in other.items()}
    sign = 1 if e.op is Op.ADD else -1
    out = dict(parts[0])
    for t, v in parts[1].items():
        out[t] = out.get(t, 0) + sign * v
    return out


def index_expr(v, loc: Loc) -> Expr:
    """An index or size: an integer expression (Python ints become int32 literals)."""
    e = to_ir(v, loc, like=types.int32) if not is_ir(v) else v
    if not (e.dtype.is_int):
        raise TileTypeError(f"an index must be an integer; got {e.dtype}", loc,
                            hint="cast it, e.g. T.cast(x, 'int32')")
    return e


def fold(v):
    """A build-time number for v: v itself when it is a Python number, the value of an IR
    expression made of literals only (the op table's reference evaluates it), else None."""
    if is_py_scalar(v):
        return v
    if isinstance(v, Const):
        return v.value
    if not isinstance(v, Call):
        return None
    args = [fold(a) for a in v.args]
    if any(a is None for a in args):
        return None
    from tilepy.ir.ops import reference
    from tilepy.ir.types import compute_dtype

    vals = [np.asarray(a, dtype=compute_dtype(x.dtype)) for a, x in zip(args, v.args)]
    out = reference(v.op, vals, tuple(x.dtype for x in v.args), v.dtype)
    return np.asarray(out).item()
