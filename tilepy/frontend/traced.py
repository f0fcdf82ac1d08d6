"""Calling plain Python helpers on runtime values: `def gelu(x): return 0.5 * x * (...)`.

As in TileLang, a Python function or lambda called in a kernel with runtime scalars runs at
build time on `Traced` stand-ins whose operators build IR. Control flow on a Traced value
raises an error that says to use T.if_then_else or a @T.macro.
"""

from __future__ import annotations

from tilepy.errors import Loc, TileTypeError
from tilepy.frontend import exprs
from tilepy.ir.ops import FUNCTIONS, Op


class Traced:
    """A runtime scalar seen by a Python helper; arithmetic on it builds IR."""

    __slots__ = ("expr", "loc")

    def __init__(self, expr, loc: Loc):
        self.expr, self.loc = expr, loc

    def __bool__(self):
        raise TileTypeError(
            "a helper function branches on a runtime value", self.loc,
            hint="use T.if_then_else(cond, a, b), or mark the helper @T.macro so its "
                 "if-statements become kernel code")

    def __index__(self):
        raise TileTypeError("a runtime value cannot be used where Python needs an int",
                            self.loc)

    @property
    def dtype(self):
        """TVM's `x.dtype`: the value's dtype, as a string-like T.dtype."""
        from tilepy.frontend.dtypes import dtype

        return dtype(self.expr.dtype.name)

    def astype(self, dt):
        """TVM's `x.astype(dt)`: a cast (T.cast)."""
        from tilepy.ir.types import dtype

        target = dtype(str(dt))
        return Traced(exprs.cast(self.expr, target, self.loc), self.loc)


def unwrap(v):
    if isinstance(v, Traced):
        return v.expr
    if isinstance(v, tuple):
        return tuple(unwrap(x) for x in v)
    return v


def _binary(op: Op, swap: bool = False):
    def method(self, other):
        a, b = (other, self) if swap else (self, other)
        return Traced(exprs.call(op, [unwrap(a), unwrap(b)], self.loc), self.loc)

    return method


def _unary(op: Op):
    def method(self):
        return Traced(exprs.call(op, [self.expr], self.loc), self.loc)

    return method


for _name, _op in [("add", Op.ADD), ("sub", Op.SUB), ("mul", Op.MUL), ("truediv", Op.DIV),
                   ("floordiv", Op.FLOORDIV), ("mod", Op.MOD), ("pow", Op.POW),
                   ("and", Op.BITAND), ("or", Op.BITOR), ("xor", Op.BITXOR),
                   ("lshift", Op.SHL), ("rshift", Op.SHR)]:
    setattr(Traced, f"__{_name}__", _binary(_op))
    setattr(Traced, f"__r{_name}__", _binary(_op, swap=True))
for _name, _op in [("lt", Op.LT), ("le", Op.LE), ("gt", Op.GT), ("ge", Op.GE),
                   ("eq", Op.EQ), ("ne", Op.NE)]:
    setattr(Traced, f"__{_name}__", _binary(_op))
Traced.__neg__ = _unary(Op.NEG)
Traced.__abs__ = _unary(Op.ABS)
Traced.__invert__ = _unary(Op.BITNOT)
Traced.__pos__ = lambda self: self
Traced.__hash__ = None  # type: ignore[assignment]

def traced_builtin(name: str, args: tuple, kwargs: dict):
    """A tile-language scalar function called from inside a traced helper."""
    loc = next(a.loc for a in args if isinstance(a, Traced))
    vals = [unwrap(a) for a in args]
    if name in FUNCTIONS:  # the op table's T.<name>(operands), as builtins.py builds them
        return Traced(exprs.call(FUNCTIONS[name], vals, loc), loc)
    if name == "if_then_else":
        cond, a, b = vals
        return Traced(exprs.call(Op.SELECT, [exprs.as_bool(cond, loc), a, b], loc), loc)
    if name == "reinterpret":  # T.reinterpret(value, dtype) or TVM's (dtype, value)
        from tilepy.ir.types import dtype

        x, dt = vals if exprs.is_ir(vals[0]) else vals[::-1]
        dt = dtype(str(dt))
        if x.dtype.bits != dt.bits:
            raise TileTypeError(f"T.reinterpret needs dtypes of one width; {x.dtype} has "
                                f"{x.dtype.bits} bits and {dt} has {dt.bits}", loc)
        return Traced(exprs.cast(x, dt, loc, Op.REINTERPRET), loc)
    if name == "Cast":  # TVM's T.Cast(dtype, value)
        name, vals = "cast", vals[::-1]
    if name == "cast":
        from tilepy.ir.types import dtype

        dt = dtype(str(kwargs.get("dtype", vals[1] if len(vals) > 1 else None)))
        return Traced(exprs.cast(exprs.to_ir(vals[0], loc, like=dt), dt, loc), loc)
    raise TileTypeError(f"T.{name} cannot be called from a helper function", loc,
                        hint="call it in the kernel body, or mark the helper @T.macro")


def call_traced(fn, args: list, kwargs: dict, loc: Loc):
    """Run a Python helper on Traced stand-ins for its runtime arguments."""
    wrap = lambda v: Traced(v, loc) if exprs.is_ir(v) else v  # noqa: E731
    result = fn(*[wrap(a) for a in args], **{k: wrap(v) for k, v in kwargs.items()})
    return unwrap(result)

