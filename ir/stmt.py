"""Tile statements and the function that holds them.

Structured: loops and ifs own their bodies (tuples of statements). Every statement carries
the user's source location (`loc`), which equality and hashing ignore. Nothing here checks
or runs a program; the verifier and the backends do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Union

from tilepy.ir.errors import NOLOC, Loc
from tilepy.ir.expr import Buffer, Expr, Load, Region, Var

Body = tuple["Stmt", ...]


class _Stmt:
    """What every statement answers from the statement table (ir/tileops.py)."""

    __slots__ = ()

    def reads(self) -> tuple[Buffer, ...]:
        """The buffers this statement itself (not its body) reads; see tileops.reads."""
        from tilepy.ir.tileops import reads

        return reads(self)

    def writes(self) -> tuple[Buffer, ...]:
        """The buffers whose elements this statement itself (not its body) writes."""
        from tilepy.ir.tileops import writes

        return writes(self)


def _loc() -> Loc:
    return field(default=NOLOC, compare=False, repr=False)  # type: ignore[return-value]


class ForKind(enum.Enum):
    SERIAL = "serial"  # T.serial, Python range
    PARALLEL = "parallel"  # T.Parallel: iterations independent
    PIPELINED = "pipelined"  # T.Pipelined: serial semantics; num_stages is a schedule hint
    UNROLLED = "unroll"  # T.unroll: serial semantics

    def __str__(self) -> str:
        return self.value


class ReduceKind(enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    ABSSUM = "abssum"
    ABSMAX = "absmax"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Alloc(_Stmt):
    """Declares a shared/fragment/local/var buffer for the rest of the enclosing body.

    `zero_fill=False` (set by the JIT's initfill pass, never by the front end) records that
    every element is written before any read, so a backend may leave it uninitialised."""

    buffer: Buffer
    loc: Loc = _loc()
    zero_fill: bool = True


@dataclass(frozen=True)
class Let(_Stmt):
    """Binds an immutable scalar for the rest of the enclosing body (`x = expr`)."""

    var: Var
    value: Expr
    loc: Loc = _loc()


@dataclass(frozen=True)
class Store(_Stmt):
    """`buffer[indices] = value`; the value is rounded to the buffer's dtype."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    loc: Loc = _loc()


@dataclass(frozen=True)
class Copy(_Stmt):
    """`T.copy(src, dst)`: element-wise, converting to dst's dtype. The two regions have
    the same shape once unit dimensions are dropped. Global edge tiles: out-of-range reads
    give 0, out-of-range writes are dropped."""

    src: Region
    dst: Region
    loc: Loc = _loc()


@dataclass(frozen=True)
class Fill(_Stmt):
    """`T.fill(dst, value)` / `T.clear(dst)` (value 0)."""

    dst: Region
    value: Expr
    loc: Loc = _loc()


@dataclass(frozen=True)
class Gemm(_Stmt):
    """`T.gemm(A, B, C, transpose_A, transpose_B, clear_accum)`: C += op(A) @ op(B).

    For each C element, k ascending from C's current value (0 if clear_accum): the product
    is computed in C's dtype, then added, one rounding per op, no FMA."""

    a: Region
    b: Region
    c: Region
    transpose_a: bool = False
    transpose_b: bool = False
    clear_accum: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True)
class Reduce(_Stmt):
    """`T.reduce_<kind>(src, dst, dim, clear)`: combine src along `dim` into dst, ascending,
    in dst's dtype, starting from the identity (clear) or from dst's value."""

    kind: ReduceKind
    src: Region
    dst: Region
    dim: int
    clear: bool = True
    loc: Loc = _loc()


@dataclass(frozen=True)
class Cumsum(_Stmt):
    """`T.cumsum(src, dst, dim, reverse)`: running sums along `dim` in dst's dtype."""

    src: Region
    dst: Region
    dim: int
    reverse: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True)
class AtomicAdd(_Stmt):
    """`T.atomic_add(dst, value)`: dst += value, with a scalar or a region of values.

    Blocks' atomic adds to one element happen in block order (linear block id ascending),
    then program order: deterministic."""

    dst: Region
    value: Union[Expr, Region]
    loc: Loc = _loc()


@dataclass(frozen=True)
class FetchAdd(_Stmt):
    """`old = dst; dst = dst + value` on one element (made from TileLang's
    `T.atomic_add(dst, value, return_prev=True)` by the thread-level front end): `old` and
    `dst` are one-element regions of one dtype, `value` has that dtype, dst is per-block
    memory. Inside a T.Parallel loop the lanes take their turns in lane order: each lane's
    old value is dst after the adds of the lanes before it."""

    old: Region
    dst: Region
    value: Expr
    # the program stores at the old values (slots): the interpreter checks that no two
    # lanes of a block got one value, which its vector step could not order
    distinct: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True)
class For(_Stmt):
    """A counted loop `for var in [start, stop) step step` of a kind."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    kind: ForKind
    body: Body
    num_stages: int = 0
    loc: Loc = _loc()


@dataclass(frozen=True)
class If(_Stmt):
    cond: Expr
    then_body: Body
    else_body: Body = ()
    loc: Loc = _loc()


@dataclass(frozen=True)
class While(_Stmt):
    cond: Expr
    body: Body
    loc: Loc = _loc()


@dataclass(frozen=True)
class Print(_Stmt):
    """`print(...)` / `T.print(x, msg)`: prints a message and scalars or whole buffers."""

    msg: str
    args: tuple[Union[Expr, Buffer], ...] = ()
    loc: Loc = _loc()


@dataclass(frozen=True)
class Assert(_Stmt):
    """`assert cond, msg` on run-time values inside a T.Kernel block: a block where `cond`
    is false (in any T.Parallel lane) fails the launch with an error naming the block."""

    cond: Expr
    msg: str = ""
    loc: Loc = _loc()


@dataclass(frozen=True)
class Breakpoint(_Stmt):
    """`breakpoint()` inside a kernel: the interpreter stops in a debugger with the block's
    buffers in scope; compiled backends ignore it."""

    loc: Loc = _loc()


@dataclass(frozen=True)
class Launch(_Stmt):
    """`with T.Kernel(*grid, threads=...) as (bx, by, bz)`: runs `body` once per block.

    Blocks are independent; `threads` is recorded, not emulated."""

    grid: tuple[Expr, ...]
    block_vars: tuple[Var, ...]
    threads: tuple[int, ...]
    body: Body
    loc: Loc = _loc()


@dataclass(frozen=True)
class Versioned(_Stmt):
    """Two versions of the same statements, made by a pass (never by the front end):
    `body` runs where `cond` holds and no pair of `apart` shares memory, `fallback`
    elsewhere. The pass that makes it guarantees that both compute the same values and
    that each access of `body` listed in `inbounds` (a global element access `A[i, j]`,
    load or store, as a Load; a tile op's global region as the Region) is in range
    wherever `body` runs, so the JIT runs those unchecked; `by` names that pass."""

    cond: Expr
    apart: tuple[tuple[Buffer, Buffer], ...]
    body: Body
    fallback: Body
    by: str
    inbounds: tuple[Load | Region, ...] = ()
    loc: Loc = _loc()


Stmt = Union[Alloc, Let, Store, Copy, Fill, Gemm, Reduce, Cumsum, AtomicAdd, For, If, While,
             Print, Assert, Breakpoint, Launch, Versioned, FetchAdd]

TILE_OPS = (Copy, Fill, Gemm, Reduce, Cumsum, AtomicAdd)


@dataclass(frozen=True)
class PrimFunc:
    """A kernel: global buffer parameters (symbolic sizes are `Var`s in their shapes),
    the symbolic sizes themselves, a body of launches, and which params are outputs that
    the caller does not pass (`out_idx`)."""

    name: str
    params: tuple[Buffer, ...]
    sizes: tuple[Var, ...]
    body: Body
    out_idx: tuple[int, ...] = ()
    loc: Loc = _loc()
    # `T.annotate_safe_value`: (buffer name, value) that out-of-range global loads give
    safe_values: tuple[tuple[str, float], ...] = ()
    # hardware-only hints (`T.use_swizzle`, `T.annotate_layout`, ...): recorded as text
    # for the printed IR, never executed, and not part of the program's identity
    hints: tuple[str, ...] = field(default=(), compare=False)
    # scalar parameters (`n: T.int32`): (position among the call's inputs, size name);
    # the calling convention only: inside the kernel each is the symbolic size it names
    scalars: tuple[tuple[int, str], ...] = field(default=(), compare=False)
    # global scratch buffers (`T.alloc_buffer` outside T.Kernel): params after the declared
    # ones that each call allocates (zeroed) and neither takes nor returns
    scratch: tuple[int, ...] = field(default=(), compare=False)
    # `T.make_tensor(P[i], shape, dtype)`: (scratch param, pointer-table param) pairs; each
    # call stacks the tensors the table's addresses point at into the scratch param, and
    # writes the ones the kernel writes back to those addresses (tilepy/pointers.py)
    pointees: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    def safe_value(self, name: str) -> float:
        """What an out-of-range load of global buffer `name` gives (0 unless annotated)."""
        return dict(self.safe_values).get(name, 0.0)

    def __str__(self) -> str:
        from tilepy.ir.printer import format_func  # printer.py imports this module

        return format_func(self)


def branches(s) -> tuple[Body, Body]:
    """The two bodies of which one runs: an if's then/else, a versioned region's body and
    fallback."""
    if isinstance(s, Versioned):
        return s.body, s.fallback
    return s.then_body, s.else_body


def walk(body: Body):
    """Every statement of a body, depth first, in program order."""
    for s in body:
        yield s
        if isinstance(s, For) or isinstance(s, While) or isinstance(s, Launch):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then_body)
            yield from walk(s.else_body)
        elif isinstance(s, Versioned):
            yield from walk(s.body)
            yield from walk(s.fallback)


def written_params(func: PrimFunc) -> frozenset[str]:
    """The names of the parameters a kernel may write: store targets, tile-op destinations
    (copy, fill, gemm's C, reduce, cumsum) and atomic adds, through re-views to their root."""
    out = {b.root.name for s in walk(func.body) for b in s.writes()}
    return frozenset(out & {p.name for p in func.params})
