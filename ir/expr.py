"""Scalar expressions, buffers and regions: the values tile statements read and write.

Frozen dataclasses (expressions carry their dtype); equality ignores source locations and
compares float literals by their bits (0.0 != -0.0; a NaN equals itself). Type rules live
in the op table (ops.py), applied by the front end as it builds a `Call`. Evaluates nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Union

from tilepy.ir.errors import NOLOC, Loc
from tilepy.ir.types import DType, Scope, int32


@dataclass(frozen=True, eq=False)
class Const:
    """A literal of a dtype. `value` is a Python bool, int or float."""

    value: Union[bool, int, float]
    dtype: DType

    def _key(self):
        v = self.value
        return (self.dtype, struct.pack("<d", v) if isinstance(v, float) else v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __post_init__(self):
        # normalise so 1 and 1.0 of the same dtype compare (and hash) equal
        if self.dtype.is_float:
            object.__setattr__(self, "value", float(self.value))
        elif self.dtype.is_bool:
            object.__setattr__(self, "value", bool(self.value))
        else:
            object.__setattr__(self, "value", int(self.value))


@dataclass(frozen=True)
class Var:
    """A scalar name: a block index, a loop variable, a symbolic size or a `Let` binding.

    Names are unique within a function (the front end renames shadowed ones).
    """

    name: str
    dtype: DType = int32


@dataclass(frozen=True)
class Buffer:
    """An n-d array of one dtype in one scope. Shape entries are expressions (a `Var` for a
    symbolic size). `data`, when set, names the buffer whose storage this one re-views
    (row-major, same dtype; `T.Tensor(shape, dtype, buf.data)`).
    """

    name: str
    shape: tuple["Expr", ...]
    dtype: DType
    scope: Scope = Scope.GLOBAL
    data: "Buffer | None" = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def root(self) -> "Buffer":
        """The buffer that owns this one's storage, through re-views (itself if none)."""
        b = self
        while b.data is not None:
            b = b.data
        return b

    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as ints, or None when a dimension is symbolic."""
        if all(isinstance(s, Const) for s in self.shape):
            return tuple(int(s.value) for s in self.shape)  # type: ignore[union-attr]
        return None


@dataclass(frozen=True)
class Load:
    """`buffer[indices]`: one element (the indices are scalars)."""

    buffer: Buffer
    indices: tuple["Expr", ...]

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True)
class Call:
    """An op of the op table applied to scalar arguments; `dtype` is the result type the
    op's type rule gave (for casts, the target)."""

    op: "Op"  # noqa: F821  (tilepy.ir.ops.Op; imported lazily to avoid a cycle)
    args: tuple["Expr", ...]
    dtype: DType
    loc: Loc = field(default=NOLOC, compare=False, repr=False)


Expr = Union[Const, Var, Load, Call]


@dataclass(frozen=True)
class Region:
    """A box of a buffer: `starts` and `extents` per dimension (same rank as the buffer).

    A tile op reads or writes exactly this box. Extents are usually constants; a region of a
    global buffer may run past its end (an edge tile: reads give 0, writes are dropped).
    """

    buffer: Buffer
    starts: tuple[Expr, ...]
    extents: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def static_extents(self) -> tuple[int, ...] | None:
        if all(isinstance(e, Const) for e in self.extents):
            return tuple(int(e.value) for e in self.extents)  # type: ignore[union-attr]
        return None

    def tile_shape(self) -> tuple[int, ...] | None:
        """The static extents with the unit dimensions dropped (how copies match sides)."""
        ext = self.static_extents()
        return None if ext is None else tuple(e for e in ext if e != 1)


def full_region(buf: Buffer) -> Region:
    """The whole of a buffer as a region."""
    zero = Const(0, int32)
    return Region(buf, tuple(zero for _ in buf.shape), tuple(buf.shape))



def loads(e: Expr):
    """Every Load in e, depth first (a load's index loads after it)."""
    if isinstance(e, Load):
        yield e
        for i in e.indices:
            yield from loads(i)
    elif isinstance(e, Call):
        for a in e.args:
            yield from loads(a)
