"""The fusion pass's model of a run (jit/passes/fusion.py): row items (`Elem`, `Rowwise`,
`Empty`), the fused `Run`, expression substitution and the fresh names of the plan being
made, and the turning of a candidate run's statements into row items (`_Items`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, loads
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Copy,
    Fill,
    For,
    ForKind,
    If,
    Let,
    Reduce,
    ReduceKind,
    Store,
)
from tilepy.ir.types import Scope, compute_dtype, int32
from tilepy.jit.passes.guards import narrowed
from tilepy.jit.passes.initfill import whole

_PLAIN = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64")
_SUMS = (ReduceKind.SUM, ReduceKind.ABSSUM)
_ids = threading.local()  # the fresh names of the plan being made


# ------------------------------------------------------------------ what a run is


@dataclass
class Elem:
    """One row's element loop `for j in range(cols)`, with statements before and after it
    (a sum's start and its store)."""

    cols: int
    j: Var
    body: list
    pre: list = field(default_factory=list)
    post: list = field(default_factory=list)
    elementwise: bool = True  # row tiles indexed [r, j] only, no ifs: may merge


@dataclass
class Rowwise:
    """One row's statements without an element loop (per-row scalars, a row's max)."""

    stmts: list


@dataclass
class Empty:
    """A row's `for j: if j CMP e: ...` (a ragged-edge mask, jit/guards.py) that the fused
    form drops: it runs only where the guard's range is empty (e free of the row)."""

    loop: For


@dataclass
class Run:
    """A fused run of body[start:stop]: `hoisted` runs first, then `loop`; only when the
    global regions lie inside their arrays, the pairs in `apart` do not overlap and the
    guards of `empty` and `full` hold."""

    start: int
    stop: int
    hoisted: tuple
    loop: For
    regions: list  # global Regions (tiles, vectors) that must lie inside their arrays
    apart: list  # (read, written) global Buffers that must not overlap
    empty: list  # guarded loops (jit/passes/guards.py) whose ranges must be empty
    full: list  # guarded loops whose ranges must be the whole loop (selects taken as true)


# ------------------------------------------------------------------ expressions


def _subst(e, m: dict):
    """e with variables renamed (m: name -> Expr), loads mapped through m['@load'] and
    calls through m['@call'] (each after its operands)."""
    if isinstance(e, Var):
        return m.get(e.name, e)
    if isinstance(e, Load):
        out = Load(e.buffer, tuple(_subst(i, m) for i in e.indices))
        f = m.get("@load")
        return f(out) if f is not None else out
    if isinstance(e, Call):
        out = Call(e.op, tuple(_subst(a, m) for a in e.args), e.dtype, e.loc)
        f = m.get("@call")
        return f(out) if f is not None else out
    return e


def _subst_stmt(s, m: dict):
    if isinstance(s, Let):
        return Let(s.var, _subst(s.value, m), s.loc)
    if isinstance(s, Store):
        return Store(s.buffer, tuple(_subst(i, m) for i in s.indices), _subst(s.value, m),
                     s.loc)
    if isinstance(s, If):
        return If(_subst(s.cond, m), tuple(_subst_stmt(t, m) for t in s.then_body),
                  tuple(_subst_stmt(t, m) for t in s.else_body), s.loc)
    raise AssertionError(type(s))


def _stmt_loads(s):
    """Every Load a Let/Store/If (and its branches) evaluates."""
    if isinstance(s, Let):
        yield from loads(s.value)
    elif isinstance(s, Store):
        for i in s.indices:
            yield from loads(i)
        yield from loads(s.value)
    elif isinstance(s, If):
        yield from loads(s.cond)
        for t in s.then_body + s.else_body:
            yield from _stmt_loads(t)
    elif isinstance(s, Reduce):
        for r in (s.src, s.dst):
            yield Load(r.buffer, r.starts)


def _stmt_stores(s):
    """(buffer, indices) of every store a statement makes (a row reduce: its dst row)."""
    if isinstance(s, Store):
        yield s.buffer, s.indices
    elif isinstance(s, If):
        for t in s.then_body + s.else_body:
            yield from _stmt_stores(t)
    elif isinstance(s, Reduce):
        yield s.dst.buffer, s.dst.starts


def _index(*parts) -> object:
    """int32 sum of index parts (Const 0 dropped)."""
    parts = [p for p in parts if not (isinstance(p, Const) and int(p.value) == 0)]
    if not parts:
        return Const(0, int32)
    out = parts[0]
    for p in parts[1:]:
        out = Call(Op.ADD, (out, p), int32)
    return out


def _fresh(kind: str) -> str:
    """A new name for the plan being made (rewrite.Fresh: `fuse_` names no user binds)."""
    return _ids.fresh(kind)


# ------------------------------------------------------------------ statements -> items


def _static(e) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _local(b: Buffer) -> bool:
    return b.scope not in (Scope.GLOBAL, Scope.VAR) and b.data is None and b.ndim > 0


def _whole(r: Region) -> bool:
    """All of a block-local buffer."""
    return _local(r.buffer) and whole(r, r.buffer.name)


def _plain(b: Buffer) -> bool:
    return b.dtype.name in _PLAIN and compute_dtype(b.dtype).name == b.dtype.name


def _no_loads(e) -> bool:
    return next(loads(e), None) is None


class _Items:
    """Turns the statements of a candidate run into row items, checking what each form
    needs; `None` from `of` ends the run there."""

    def __init__(self):
        self.rows: int | None = None
        self.r = Var(_fresh("r"), int32)
        self.regions: list[Region] = []  # global regions of the copies
        self.accs: list[Buffer] = []
        self.gread: set = set()
        self.full: list = []
        self.gwritten: set = set()

    def _rows(self, n: int | None) -> bool:
        if n is None or n < 1:
            return False
        if self.rows is None:
            self.rows = n
        return self.rows == n

    def _j(self, cols: int) -> Var:
        return Var(_fresh("j"), int32)

    def of(self, s):
        if isinstance(s, For):
            return self._parallel(s)
        if isinstance(s, Copy):
            return self._copy(s)
        if isinstance(s, Fill):
            return self._fill(s)
        if isinstance(s, Reduce):
            return self._reduce(s)
        return None

    def _parallel(self, s: For):
        if (s.kind is not ForKind.PARALLEL or _static(s.start) != 0 or _static(s.step) != 1
                or not self._rows(_static(s.stop))):
            return None
        if any(b.scope is Scope.GLOBAL for t in s.body for b in _touched(t)):
            return None  # globals are reached through copies only (their regions checked)
        m = {s.var.name: self.r}
        if all(isinstance(t, (Let, Store)) for t in s.body):
            return Rowwise([_subst_stmt(t, m) for t in s.body])
        if len(s.body) != 1 or not isinstance(s.body[0], For):
            return None
        inner = s.body[0]
        cols = _static(inner.stop)
        if (inner.kind is not ForKind.PARALLEL or _static(inner.start) != 0
                or _static(inner.step) != 1 or cols is None or cols < 1
                or not all(_flat(t) for t in inner.body)):
            return None
        j = self._j(cols)
        body = [_subst_stmt(t, {**m, inner.var.name: j}) for t in inner.body]
        loop = For(j, inner.start, inner.stop, inner.step, ForKind.SERIAL, tuple(body))
        if narrowed(loop) is not None and not _mentions(body[0].cond, self.r.name):
            return Empty(loop)
        local = {self.r.name} | _lets(body)  # names the block cannot evaluate
        body = [_subst_stmt(t, {"@call": lambda c, j=j: self._select(c, j, cols, local)})
                for t in body]
        return Elem(cols, j, body, elementwise=not any(isinstance(t, If) for t in body))

    def _select(self, c: Call, j: Var, cols: int, local: set):
        """`select(j CMP e, a, b)` as `a`, where the fused form runs only when the
        condition holds for every column (edge tiles take the unfused statements); e is
        evaluated once per block, so it must not use the row or the loop's own lets."""
        if c.op is not Op.SELECT or any(_mentions(c.args[0], n) for n in local):
            return c
        probe = For(j, Const(0, int32), Const(cols, int32), Const(1, int32), ForKind.SERIAL,
                    (If(c.args[0], ()),))
        if narrowed(probe) is None:
            return c
        self.full.append(probe)
        return c.args[1]

    def _side(self, reg: Region, j: Var, read: bool):
        """The element [r, j] of a copy's side: (buffer, indices), or None."""
        b = reg.buffer
        if _whole(reg):
            return b, (self.r, j)
        if b.scope is not Scope.GLOBAL or b.ndim != 2 or not all(_no_loads(x) for x in reg.starts):
            return None
        self.regions.append(reg)
        (self.gread if read else self.gwritten).add(b)
        idx = (_index(reg.starts[0], self.r), _index(reg.starts[1], j))
        return b, idx

    def _copy(self, s: Copy):
        src, dst = s.src, s.dst
        if src.buffer.dtype != dst.buffer.dtype or not _plain(src.buffer):
            return None
        ext = src.static_extents()
        if ext is None or ext != dst.static_extents():
            return None
        if len(ext) == 1 and _whole(src) and _whole(dst) and self._rows(ext[0]):
            return Rowwise([Store(dst.buffer, (self.r,), Load(src.buffer, (self.r,)), s.loc)])
        if (len(ext) != 2 or not (_whole(src) or _whole(dst)) or not self._rows(ext[0])
                or src.buffer.ndim != 2 or dst.buffer.ndim != 2):
            return None
        j = self._j(ext[1])
        a, b = self._side(src, j, True), self._side(dst, j, False)
        if a is None or b is None:
            return None
        return Elem(ext[1], j, [Store(b[0], b[1], Load(a[0], a[1]), s.loc)])

    def _fill(self, s: Fill):
        d = s.dst
        if not _whole(d) or not _no_loads(s.value):
            return None
        shape = d.static_extents()
        if len(shape) == 1 and self._rows(shape[0]):
            return Rowwise([Store(d.buffer, (self.r,), s.value, s.loc)])
        if len(shape) == 2 and self._rows(shape[0]):
            j = self._j(shape[1])
            return Elem(shape[1], j, [Store(d.buffer, (self.r, j), s.value, s.loc)])
        return None

    def _reduce(self, s: Reduce):
        src, dst = s.src, s.dst
        if (s.dim != 1 or not _whole(src) or not _whole(dst) or src.buffer.ndim != 2
                or dst.buffer.ndim != 1 or not self._rows(src.static_extents()[0])
                or dst.static_extents()[0] != self.rows):
            return None
        cols = src.static_extents()[1]
        dt = dst.buffer.dtype
        if s.kind not in _SUMS or src.buffer.dtype != dt or dt.name not in ("float32", "float64"):
            row = Reduce(s.kind, Region(src.buffer, (self.r, Const(0, int32)),
                                        (Const(1, int32), Const(cols, int32))),
                         Region(dst.buffer, (self.r,), (Const(1, int32),)), 1, s.clear, s.loc)
            return Rowwise([row])
        acc = Buffer(_fresh("acc"), (), dt, Scope.VAR)
        self.accs.append(acc)
        j = self._j(cols)
        x = Load(src.buffer, (self.r, j))
        if s.kind is ReduceKind.ABSSUM:
            x = Call(Op.ABS, (x,), dt)
        start = Const(0.0, dt) if s.clear else Load(dst.buffer, (self.r,))
        return Elem(cols, j, [Store(acc, (), Call(Op.ADD, (Load(acc, ()), x), dt), s.loc)],
                    pre=[Store(acc, (), start, s.loc)],
                    post=[Store(dst.buffer, (self.r,), Load(acc, ()), s.loc)])


def _lets(body) -> set:
    """Names the lets of a loop body bind (in its ifs too)."""
    out: set = set()
    for s in body:
        if isinstance(s, Let):
            out.add(s.var.name)
        elif isinstance(s, If):
            out |= _lets(s.then_body + s.else_body)
    return out


def _mentions(e, name: str) -> bool:
    if isinstance(e, Var):
        return e.name == name
    if isinstance(e, Load):
        return any(_mentions(i, name) for i in e.indices)
    return isinstance(e, Call) and any(_mentions(a, name) for a in e.args)


def _flat(s) -> bool:
    """A let, a store, or an if of them (no loops)."""
    if isinstance(s, (Let, Store)):
        return True
    return isinstance(s, If) and all(_flat(t) for t in s.then_body + s.else_body)


def _hoistable(s, earlier: list) -> bool:
    """A copy or fill into a block-local buffer that no row item indexes, reading nothing
    the run's earlier items write and writing nothing they touch: it may run first."""
    if not isinstance(s, (Copy, Fill)) or not _local(s.dst.buffer):
        return False
    if isinstance(s, Copy) and s.src.buffer.scope is not Scope.GLOBAL and not _local(s.src.buffer):
        return False
    written = {b.name for it in earlier for st in _item_stmts(it) for b, _ in _stmt_stores(st)}
    read = {ld.buffer.name for it in earlier for st in _item_stmts(it) for ld in _stmt_loads(st)}
    src = {b.name for b in s.reads()}  # a fill's value too
    return not (src & written) and s.dst.buffer.name not in written | read


def _touched(s):
    """The buffers a statement of a T.Parallel body (and its loops) loads or stores."""
    for t in s.body if isinstance(s, For) else (s,):
        if isinstance(t, For):
            yield from _touched(t)
        else:
            yield from (ld.buffer for ld in _stmt_loads(t))
            yield from (b for b, _ in _stmt_stores(t))


def _item_stmts(it) -> list:
    return it.pre + it.body + it.post if isinstance(it, Elem) else it.stmts


