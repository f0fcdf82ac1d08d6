"""The objects a kernel is written with that the front end recognises: `Builtin` (each
`T.*` function), `SymbolicSize` and `SizeExpr` (sizes bound when a kernel is called) and
`TensorSpec` (a `T.Tensor(shape, dtype)` annotation).

tilepy.language hands them to the user; the front end below it recognises them by type or
identity, so they live here, under both. They hold no semantics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tilepy.boundary import api_boundary
from tilepy.errors import TileSyntaxError
from tilepy.frontend.traced import Traced, traced_builtin
from tilepy.precision.formats import FORMATS, Format, get_format


class Builtin:
    """A tile-language function; `python` (optional) is its meaning on build-time values."""

    def __init__(self, name: str, python: Callable[..., Any] | None = None):
        self.name = name
        self.python = python

    def __repr__(self) -> str:
        return f"T.{self.name}"

    @api_boundary
    def __call__(self, *args, **kwargs):
        if any(isinstance(a, Traced) for a in (*args, *kwargs.values())):
            return traced_builtin(self.name, args, kwargs)
        if self.python is not None:
            return self.python(*args, **kwargs)
        raise TileSyntaxError(
            f"T.{self.name} can only be used inside a kernel body",
            hint="write it inside a @T.prim_func / @tilepy.jit function",
        )


@dataclass(frozen=True)
class SymbolicSize:
    """A size named at build time and bound when the kernel is called (`T.symbolic("M")`)."""

    name: str
    dtype: Format = FORMATS["int32"]

    def __repr__(self) -> str:
        return self.name


class SizeExpr:
    """Arithmetic on symbolic sizes before a kernel body exists (`T.Tensor((M * 2,), ...)`):
    recorded here, turned into IR by the front end."""

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args

    def __repr__(self) -> str:
        return f"({self.args[0]!r} {self.op} {self.args[1]!r})"


def _size_op(op: str, swap: bool = False):
    def method(self, other):
        if not isinstance(other, (int, SymbolicSize, SizeExpr)):
            return NotImplemented
        return SizeExpr(op, (other, self) if swap else (self, other))

    return method


for _cls in (SymbolicSize, SizeExpr):
    for _op, _name in (("+", "add"), ("-", "sub"), ("*", "mul"), ("//", "floordiv"),
                       ("%", "mod")):
        setattr(_cls, f"__{_name}__", _size_op(_op))
        setattr(_cls, f"__r{_name}__", _size_op(_op, swap=True))


class TensorSpec:
    """`T.Tensor(shape, dtype)`: a kernel parameter (or, with `data`, a re-view)."""

    def __init__(self, shape, dtype="float32", data=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = get_format(dtype)
        self.data = data

    scalar = False  # a float scalar parameter (`x: T.float32`), held in a 1-element tensor

    @classmethod
    def scalar_param(cls, dtype) -> TensorSpec:
        spec = cls((1,), dtype)
        spec.scalar = True
        return spec

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype})"
