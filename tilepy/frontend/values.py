"""The kinds of value a name can hold while a kernel is translated, and region operands.

Build-time Python values, IR expressions, buffers, and the two operand forms of tile ops: a
`Region` (explicit box) or a `StartPoint` (a corner whose extent comes from the other
operand, as in `T.copy(A[by * 64, k * 32], A_shared)`). No IR is built here beyond regions.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.errors import Loc, TileTypeError
from tilepy.ir.expr import Buffer, Const, Expr, Region, full_region
from tilepy.ir.types import int32


@dataclass(frozen=True)
class StartPoint:
    """`buf[i, j]` used as a tile-op operand: a corner; the extents come from elsewhere."""

    buffer: Buffer
    starts: tuple[Expr, ...]


@dataclass(frozen=True)
class DataRef:
    """`buf.data`: the storage of a buffer, for `T.Tensor(shape, dtype, buf.data)`."""

    buffer: Buffer


@dataclass(frozen=True)
class PointeeView:
    """`T.make_tensor(P[i], shape, dtype)`: the tensor that address P[i] points at, seen as
    `buffer[i, ...]` of a stacked global buffer that each call fills from the addresses."""

    buffer: Buffer
    index: Expr


Operand = Region | StartPoint


@dataclass(frozen=True)
class Stale:
    """A name rebound inside a runtime loop or branch, seen after that block ended: the
    kernel cannot know which binding holds there, so reading it is an error."""

    name: str
    block: str  # "loop" or "if"
    loc: Loc  # where the block starts

    def error(self, loc: Loc) -> TileTypeError:
        return TileTypeError(
            f"{self.name!r} was reassigned inside the {self.block} at line {self.loc.line}, "
            f"so its value after that {self.block} is not defined in a kernel", loc,
            hint=f"declare it before the {self.block} with `{self.name} = "
                 "T.alloc_var(dtype)` (or `T.alloc_local((1,), dtype)`, used as "
                 f"{self.name}[0]) and assign to it inside")


def describe(v) -> str:
    """A short phrase for a value in an error message."""
    if isinstance(v, Buffer):
        return f"the buffer {v.name} ({v.dtype}, {v.scope})"
    if isinstance(v, Region):
        return f"a region of {v.buffer.name}"
    if isinstance(v, StartPoint):
        return f"an element of {v.buffer.name}"
    if hasattr(v, "dtype") and hasattr(v, "__dataclass_fields__"):
        return f"a {v.dtype} value"
    return f"{type(v).__name__} {v!r}"[:80]


def operand_region(op: Operand, ext: tuple[Expr, ...] | None, loc: Loc) -> Region:
    """A region for a tile-op operand: regions as they are, start points given extents."""
    if isinstance(op, Region):
        return op
    if ext is None:
        raise TileTypeError(
            f"cannot tell the extent of {op.buffer.name}[...]: both operands are single "
            "points", loc, hint="give one side as a whole buffer or a slice (a:b)",
        )
    return Region(op.buffer, op.starts, align_extents(ext, op.buffer.ndim, loc))


def align_extents(ext: tuple[Expr, ...], rank: int, loc: Loc) -> tuple[Expr, ...]:
    """Extents of rank `rank` for a tile of extents `ext`: leading dims padded with 1, or
    leading unit dims dropped (TileLang's rule for start-point operands)."""
    one = Const(1, int32)
    ext = tuple(ext)
    while len(ext) > rank and _is_one(ext[0]):
        ext = ext[1:]
    if len(ext) > rank:
        raise TileTypeError(
            f"a tile of {len(ext)} dimensions does not fit a {rank}-d buffer", loc)
    return (one,) * (rank - len(ext)) + ext


def _is_one(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1


def region_of(v, loc: Loc) -> Operand:
    """A tile-op operand from a front-end value."""
    if isinstance(v, Buffer):
        return full_region(v)
    if isinstance(v, (Region, StartPoint)):
        return v
    raise TileTypeError(f"expected a buffer or a region of one; got {describe(v)}", loc)
