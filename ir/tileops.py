"""The statement table: per statement kind, its surface name, its display name, which of
its fields hold the buffers it reads and writes and, for a tile op, its call form, its shape
rule (the verifier's) and its work rule (the flop counts of ir/analysis.py); and where a
cleared reduction starts.

Passes ask a statement (`s.reads()`, `s.writes()`, `display(s)`) and never keep their own
lists of kinds; a kind missing here fails the table's test. Says nothing about values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tilepy.ir.expr import Buffer, Load, Region, loads
from tilepy.ir.stmt import (
    Alloc,
    Assert,
    AtomicAdd,
    Breakpoint,
    Copy,
    Cumsum,
    FetchAdd,
    Fill,
    For,
    Gemm,
    If,
    Launch,
    Let,
    Print,
    Reduce,
    ReduceKind,
    Store,
    Versioned,
    While,
    walk,
)
from tilepy.ir.types import DType, Scope


def _never(s) -> bool:
    return False


Problem = "tuple[str, str | None] | None"  # a shape rule's finding: (message, hint)
Extents = Callable[[Region], "tuple[int, ...]"]  # a region's extents at given sizes

REQUIRED = object()  # an option the printed form always names and the parser requires


@dataclass(frozen=True)
class Form:
    """A tile op's call form, printed and parsed from this entry (ir/printer.py,
    ir/parser.py): `T.<name>(<args>, <keyword>=<value>, ...)`. `args` are fields in order
    (regions, expressions, or either for a field typed as both); `options` are
    (keyword, field, default): printed when the value is not the default (always when the
    default is REQUIRED), read back as literals."""

    args: tuple[str, ...]
    options: tuple[tuple[str, str, object], ...] = ()


@dataclass(frozen=True)
class StmtDef:
    """One statement kind. `surface` and `display` may hold `{kind}` (the statement's
    `kind` field, e.g. T.reduce_max). `reads` names the fields whose buffers (regions,
    buffers) and loads (expressions, region bounds) the statement reads; `writes` the
    fields (regions or buffers) whose elements it writes; `updates(s)` is true when it also
    reads what it writes (an accumulating destination)."""

    surface: str  # as docs/language.md writes it; `*` stands for several names
    display: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    updates: Callable[[object], bool] = _never
    internal: bool = False  # made by passes only: no surface form, no front-end binding
    form: Form | None = None  # the call form of a tile op (None: printer/parser methods)
    tile: "TileRules | None" = None  # a tile op's shape and work rules


@dataclass(frozen=True)
class TileRules:
    """How the verifier and the analysis treat a tile op beyond its fields' regions and
    expressions (which they check and count from `reads`/`writes`): `shape(s)` returns
    (message, hint) when the static extents disagree, else None; `work(s, extents)` the
    ops it performs as {(category, name): count} (bytes moved are counted from the fields)."""

    shape: Callable[[object], Problem]
    work: Callable[[object, Extents], dict]


def _no_shape(s) -> Problem:
    return None


def _no_work(s, extents: Extents) -> dict:
    return {}


def _copy_shape(s) -> Problem:
    a, b = s.src.tile_shape(), s.dst.tile_shape()
    if a is not None and b is not None and a != b:
        return (f"T.copy shapes differ: source {s.src.buffer.name} tile {a}, destination "
                f"{s.dst.buffer.name} tile {b}",
                "the two sides must have the same shape once unit dimensions are dropped")
    return None


def _copy_work(s, extents: Extents) -> dict:
    if s.src.dtype == s.dst.dtype:
        return {}
    return {("ops", "convert"): math.prod(extents(s.src))}


def _gemm_shape(s) -> Problem:
    if not s.c.dtype.is_float and not (s.c.dtype.is_int and s.a.dtype.is_int and s.b.dtype.is_int):
        return (f"T.gemm accumulates into {s.c.dtype}; mixing integer and float operands "
                f"is not supported", "accumulate into a float fragment, or make A and B "
                "integers too")
    for r in (s.a, s.b, s.c):
        if len(r.extents) != 2:
            return (f"T.gemm operands are 2-d; {r.buffer.name} has {len(r.extents)} "
                    f"dimension(s)", None)
    a, b, c = s.a.static_extents(), s.b.static_extents(), s.c.static_extents()
    if a is None or b is None or c is None:
        return None
    (m, k) = a[::-1] if s.transpose_a else a
    (k2, n) = b[::-1] if s.transpose_b else b
    if k != k2 or (m, n) != c:
        return (f"T.gemm shapes do not agree: A {a}{' (transposed)' * s.transpose_a}, "
                f"B {b}{' (transposed)' * s.transpose_b}, C {c}; expected A (M, K), "
                f"B (K, N), C (M, N)", "check transpose_A / transpose_B and the tile sizes")
    return None


def _gemm_work(s, extents: Extents) -> dict:
    a, b = extents(s.a), extents(s.b)
    m, k = a[::-1] if s.transpose_a else a
    n = b[0] if s.transpose_b else b[1]
    return {("flops", "gemm"): 2 * m * n * k}


def _dim_problem(s, what: str) -> Problem:
    n = len(s.src.extents)
    if not 0 <= s.dim < n:
        return (f"{what} dim={s.dim} is out of range for a {n}-d source",
                f"dim must be in [0, {n - 1}]")
    return None


def _reduce_shape(s) -> Problem:
    what = f"T.reduce_{s.kind.value}"
    src, dst = s.src.static_extents(), s.dst.static_extents()
    problem = _dim_problem(s, what)
    if problem or src is None or dst is None:
        return problem
    dropped = src[:s.dim] + src[s.dim + 1:]
    kept = src[:s.dim] + (1,) + src[s.dim + 1:]
    if dst not in (dropped, kept):
        return (f"{what} over dim {s.dim} of {src} gives {dropped} (or {kept}); the "
                f"destination is {dst}", None)
    return None


def _cumsum_shape(s) -> Problem:
    src, dst = s.src.static_extents(), s.dst.static_extents()
    problem = _dim_problem(s, "T.cumsum")
    if problem is None and src != dst:  # a static side and a symbolic one differ too
        return f"T.cumsum needs src and dst of one shape; got {src} and {dst}", None
    return problem


def _atomic_shape(s) -> Problem:
    if isinstance(s.value, Region):
        a, b = s.value.tile_shape(), s.dst.tile_shape()
        if a is not None and b is not None and a != b:
            return f"T.atomic_add shapes differ: value tile {a}, destination {b}", None
    return None


def _fetch_shape(s) -> Problem:
    for r in (s.old, s.dst):
        if r.static_extents() is not None and any(e != 1 for e in r.static_extents()):
            return (f"T.fetch_add takes one element; {r.buffer.name} has extents "
                    f"{r.static_extents()}", None)
    if not s.old.dtype == s.dst.dtype == s.value.dtype or s.dst.dtype.is_bool:
        return (f"T.fetch_add needs one numeric dtype for old, dst and value; got "
                f"{s.old.dtype}, {s.dst.dtype}, {s.value.dtype}", None)
    if s.dst.buffer.root.scope is Scope.GLOBAL:
        return (f"T.fetch_add into global {s.dst.buffer.name}: blocks run in no defined "
                "order", "count in shared memory")
    return None


def _combines(what: str, dst: Region, n: int) -> dict:
    """n applications of a tile op's combining op (+, max, ...) into dst: ops, and flops
    when dst holds floats."""
    out = {("ops", what): n}
    if dst.dtype.is_float:
        out["flops", what] = n
    return out


def _fold_work(what: str, over: str):
    return lambda s, extents: _combines(what, s.dst, math.prod(extents(getattr(s, over))))


STMTS: dict[type, StmtDef] = {
    Alloc: StmtDef("T.alloc_*", "an allocation"),
    Let: StmtDef("name = expr", "a binding", reads=("value",)),
    Store: StmtDef("buf[i, j] = v", "a store", reads=("indices", "value"), writes=("buffer",)),
    Copy: StmtDef("T.copy", "T.copy", reads=("src",), writes=("dst",),
                  form=Form(("src", "dst")), tile=TileRules(_copy_shape, _copy_work)),
    Fill: StmtDef("T.fill", "T.fill", reads=("value",), writes=("dst",),
                  tile=TileRules(_no_shape, _no_work)),
    Gemm: StmtDef("T.gemm", "T.gemm", reads=("a", "b"), writes=("c",),
                  updates=lambda s: not s.clear_accum,
                  form=Form(("a", "b", "c"), (("transpose_A", "transpose_a", False),
                                              ("transpose_B", "transpose_b", False),
                                              ("clear_accum", "clear_accum", False))),
                  tile=TileRules(_gemm_shape, _gemm_work)),
    Reduce: StmtDef("T.reduce_{kind}", "T.reduce_{kind}", reads=("src",), writes=("dst",),
                    updates=lambda s: not s.clear,
                    form=Form(("src", "dst"), (("dim", "dim", REQUIRED),
                                               ("clear", "clear", True))),
                    tile=TileRules(_reduce_shape, _fold_work("reduce", "src"))),
    Cumsum: StmtDef("T.cumsum", "T.cumsum", reads=("src",), writes=("dst",),
                    form=Form(("src", "dst"), (("dim", "dim", REQUIRED),
                                               ("reverse", "reverse", False))),
                    tile=TileRules(_cumsum_shape, _fold_work("cumsum", "src"))),
    AtomicAdd: StmtDef("T.atomic_add", "T.atomic_add", reads=("value",), writes=("dst",),
                       updates=lambda s: True, form=Form(("dst", "value")),
                       tile=TileRules(_atomic_shape, _fold_work("atomic_add", "dst"))),
    FetchAdd: StmtDef("T.fetch_add", "a fetch-and-add", reads=("value", "dst"),
                      writes=("old", "dst"),
                      internal=True,
                      form=Form(("old", "dst", "value"), (("distinct", "distinct", False),)),
                      tile=TileRules(_fetch_shape, lambda s, extents: _combines(
                          "fetch_add", s.dst, 1))),
    For: StmtDef("for", "a loop", reads=("start", "stop", "step")),
    If: StmtDef("if", "an if", reads=("cond",)),
    While: StmtDef("while", "a while loop", reads=("cond",)),
    Print: StmtDef("T.print", "T.print", reads=("args",)),
    Assert: StmtDef("assert", "an assert", reads=("cond",)),
    Breakpoint: StmtDef("breakpoint()", "breakpoint()"),
    Launch: StmtDef("T.Kernel", "a T.Kernel block", reads=("grid",)),
    Versioned: StmtDef("", "a versioned region", reads=("cond",), internal=True),
}


def entry(s) -> StmtDef:
    d = STMTS.get(type(s))
    if d is None:
        raise KeyError(f"{type(s).__name__}: no entry in ir/tileops.py")
    return d


def surface(s) -> str:
    """How the user writes statement s (`T.reduce_max`)."""
    return entry(s).surface.format(kind=getattr(s, "kind", ""))


def display(s) -> str:
    """How messages and comments name statement s."""
    return entry(s).display.format(kind=getattr(s, "kind", ""))


def _collect(x, out: list[Buffer]) -> None:
    """The buffers x reads: a buffer or region's own (and its bounds' loads), an
    expression's loads; tuples element by element."""
    if isinstance(x, Buffer):
        out.append(x)
    elif isinstance(x, Region):
        out.append(x.buffer)
        _bounds(x, out)
    elif isinstance(x, tuple):
        for y in x:
            _collect(y, out)
    elif x is not None:
        out.extend(ld.buffer for ld in loads(x))


def _bounds(r: Region, out: list[Buffer]) -> None:
    for e in r.starts + r.extents:
        out.extend(ld.buffer for ld in loads(e))


def reads(s, updates: bool = True) -> tuple[Buffer, ...]:
    """The buffers statement s itself (not its body) reads, in field order, maybe
    repeated: operands, loads in its expressions and in its destinations' bounds, and,
    with `updates`, a destination it accumulates into (gemm without clear_accum, a reduce
    without clear, an atomic add)."""
    d = entry(s)
    out: list[Buffer] = []
    for f in d.reads:
        _collect(getattr(s, f), out)
    for f in d.writes:
        w = getattr(s, f)
        if isinstance(w, Region):
            _bounds(w, out)
            if updates and d.updates(s):
                out.append(w.buffer)
    return tuple(out)


def writes(s) -> tuple[Buffer, ...]:
    """The buffers whose elements statement s itself (not its body) writes."""
    out = []
    for f in entry(s).writes:
        w = getattr(s, f)
        out.append(w.buffer if isinstance(w, Region) else w)
    return tuple(out)


def global_accesses(body) -> tuple[Load | Region, ...]:
    """The global accesses of a body and of the bodies in it, in program order, each once:
    element loads and stores as Loads (`A[i, j]`), tile ops' regions as Regions (what a
    Versioned statement's `inbounds` lists)."""
    out: dict = {}

    def expr(e) -> None:
        for ld in loads(e):
            if ld.buffer.scope is Scope.GLOBAL:
                out[ld] = None

    for s in walk(body):
        d = entry(s)
        for f in (*d.reads, *d.writes):
            for x in _items(getattr(s, f)):
                if isinstance(x, Region):
                    for e in x.starts + x.extents:
                        expr(e)
                    if x.buffer.scope is Scope.GLOBAL:
                        out[x] = None
                elif isinstance(x, Buffer):  # a Store's target (T.print's buffers: whole)
                    if f in d.writes and x.scope is Scope.GLOBAL:
                        out[Load(x, s.indices)] = None
                else:
                    expr(x)
    return tuple(out)


def _items(x) -> tuple:
    return x if isinstance(x, tuple) else () if x is None else (x,)


def written_regions(s) -> tuple[Region, ...]:
    """The regions a tile op writes (empty for a statement that writes elements)."""
    return tuple(w for w in (getattr(s, f) for f in entry(s).writes) if isinstance(w, Region))


def reduce_identity(kind: ReduceKind, dt: DType) -> int | float:
    """Where a cleared `T.reduce_<kind>` into dt starts, in both backends: a value of dt
    that the fold's op leaves every value of dt unchanged with, so an empty reduction gives
    it. Sums and abs reductions start at 0; max at dt's lowest value and min at its highest:
    +-inf where dt has them, else its largest finite value (float8_e4m3fn's -inf would round
    to NaN; fp4 has no inf) or, for a format without a sign (e8m0), its smallest value;
    an integer dtype's range."""
    if kind in (ReduceKind.SUM, ReduceKind.ABSSUM, ReduceKind.ABSMAX):
        return 0
    if dt.is_int:
        return dt.min_value if kind is ReduceKind.MAX else dt.max_finite
    if kind is ReduceKind.MIN:
        return math.inf if dt.has_inf else dt.max_finite
    if dt.has_inf:
        return -math.inf
    return -dt.max_finite if dt.has_sign else dt.min_subnormal


ASSERT_HINT = ("the kernel's inputs break its assert; check them before the call, or run "
               "the kernel in the interpreter to see this block's values")


def assert_message(block: str, msg: str) -> str:
    """The text of a run-time assert that failed in `block` (both backends)."""
    return f"{block}: assertion failed" + (f": {msg}" if msg else "")
