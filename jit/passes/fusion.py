"""The fusion pass: a run of a block's tile statements that each work row by row on the same
rows becomes one loop over the rows, each row's statements in order, adjacent element loops
merged (docs/jit.md). On by default in fast mode, on request in exact mode (`fuse=True`):
the fused form gives the same bits, and runs only where its run-time conditions hold, as
the body of a `Versioned` statement whose fallback is the unfused statements. `plan` says
what qualifies and why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, loads
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
    Copy,
    Fill,
    For,
    ForKind,
    If,
    Launch,
    Let,
    PrimFunc,
    Reduce,
    ReduceKind,
    Store,
    Versioned,
    While,
    walk,
)
from tilepy.ir.tileops import global_accesses
from tilepy.ir.types import Scope, bool_, compute_dtype, int32, int64
from tilepy.jit.passes.guards import as_int64 as _i64
from tilepy.jit.passes.guards import narrowed
from tilepy.jit.passes.initfill import needs_zeros, reviewed, whole
from tilepy.jit.passes.rewrite import Fresh, map_body, map_exprs, with_bodies

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


# ------------------------------------------------------------------ checks and rewriting


def _check(items: list, r: Var, gread: set, gwritten: set, views: set) -> set | None:
    """The row-indexed local buffers, if the items keep to rows (else None); marks element
    loops that index other than [r, j] as not element-wise."""
    rowset: set[str] = set()
    for it in items:
        for st in _item_stmts(it):
            for ld in _stmt_loads(st):
                if _local(ld.buffer) and ld.indices and ld.indices[0] == r:
                    rowset.add(ld.buffer.name)
            for b, idx in _stmt_stores(st):
                if _local(b) and idx and idx[0] == r:
                    rowset.add(b.name)
    for it in items:
        for st in _item_stmts(it):
            accesses = [(ld.buffer, ld.indices, False) for ld in _stmt_loads(st)]
            accesses += [(b, idx, True) for b, idx in _stmt_stores(st)]
            for b, idx, store in accesses:
                if b.scope is Scope.GLOBAL:
                    if b not in gread | gwritten:
                        return None  # a global outside the copies
                    continue
                if b.scope is Scope.VAR or b.ndim == 0:
                    if store and b.name not in _ids.fresh.made:
                        return None  # a T.alloc_var written per row
                    continue
                if b.data is not None or b.name in views:
                    return None  # shares storage with another buffer
                if b.name in rowset:
                    if not idx or idx[0] != r:
                        return None
                    if isinstance(it, Elem):
                        if b.ndim == 1 and store and st in it.body:
                            return None  # a per-row value written per element
                        if b.ndim == 2 and idx[1:] != (it.j,):
                            it.elementwise = False
                elif store:
                    return None  # a shared buffer written row by row
    if gread & gwritten:
        return None
    return rowset


def _merge(items: list) -> list:
    """Adjacent element-wise loops over the same columns, as one loop."""
    out: list = []
    for it in items:
        prev = out[-1] if out else None
        if (isinstance(it, Elem) and isinstance(prev, Elem) and prev.elementwise
                and it.elementwise and prev.cols == it.cols and _independent(prev, it)):
            m = {it.j.name: prev.j}
            prev.body += [_subst_stmt(s, m) for s in it.body]
            prev.pre += it.pre
            prev.post += [_subst_stmt(s, m) for s in it.post]
            continue
        out.append(it)
    return out


def _independent(a: Elem, b: Elem) -> bool:
    """b's start reads nothing a writes, and b's loop touches nothing a's post writes
    (a's post then runs after b's loop, b's start before a's loop)."""
    a_writes = {x.name for s in a.body + a.post for x, _ in _stmt_stores(s)}
    b_pre = {ld.buffer.name for s in b.pre for ld in _stmt_loads(s)}
    post = {x.name for s in a.post for x, _ in _stmt_stores(s)}
    b_reads = {ld.buffer.name for s in b.body + b.post for ld in _stmt_loads(s)}
    b_writes = {x.name for s in b.body + b.post for x, _ in _stmt_stores(s)}
    return not (b_pre & a_writes) and not ((b_reads | b_writes) & post)


def _rewrite(items: list, r: Var, rowset: set) -> None:
    """Forward copies of global rows to their loads, pass values stored and re-read in one
    loop in variables (in place)."""
    copy_of: dict[str, tuple] = {}  # row tile -> (global, row start, col start)
    for it in items:
        if not isinstance(it, Elem):
            it.stmts = [_row_source(st, copy_of, r) for st in it.stmts]
            for st in it.stmts:
                for b, _ in _stmt_stores(st):
                    copy_of.pop(b.name, None)
            continue
        cur: dict[str, Var] = {}
        body = []
        for st in it.body:
            stored = {b.name for b, _ in _stmt_stores(st)} if isinstance(st, If) else set()

            def load(ld: Load, cur=cur, it=it, stored=stored):
                if (ld.buffer.name in rowset and ld.buffer.ndim == 2 and ld.indices == (r, it.j)
                        and ld.buffer.name not in stored):
                    if ld.buffer.name in cur:
                        return cur[ld.buffer.name]
                    src = copy_of.get(ld.buffer.name)
                    if src is not None and it.cols == _static(ld.buffer.shape[1]):
                        g, s0, s1 = src
                        return Load(g, (_index(s0, r), _index(s1, it.j)))
                return ld

            st = _subst_stmt(st, {"@load": load})
            if isinstance(st, Store) and st.buffer.name in rowset and st.buffer.ndim == 2:
                name = st.buffer.name
                if st.indices == (r, it.j) and st.value.dtype == st.buffer.dtype:
                    v = Var(_fresh("v"), st.value.dtype)
                    body += [Let(v, st.value, st.loc), Store(st.buffer, st.indices, v, st.loc)]
                    cur[name] = v
                    copy_of.pop(name, None)
                    src = _global_row(st.value, r, it.j)
                    if src is not None and it.cols == _static(st.buffer.shape[1]):
                        copy_of[name] = src
                    continue
                cur.pop(name, None)
                copy_of.pop(name, None)
            elif isinstance(st, If):
                for b, _ in _stmt_stores(st):
                    cur.pop(b.name, None)
                    copy_of.pop(b.name, None)
            body.append(st)
        it.body = body


def _row_source(st, copy_of: dict, r: Var):
    """A row reduce of a tile row that is still a copy of a global row, reading the
    global row instead (jit/tiles.py's `_extreme` then reads it in place)."""
    if not isinstance(st, Reduce) or st.src.buffer.name not in copy_of:
        return st
    g, s0, s1 = copy_of[st.src.buffer.name]
    cols = st.src.extents[1]
    if _static(cols) != _static(st.src.buffer.shape[1]):
        return st
    src = Region(g, (_index(s0, r), _index(s1)), st.src.extents)
    return Reduce(st.kind, src, st.dst, st.dim, st.clear, st.loc)


def _forward_vector(h, items: list, rest: tuple, regions: list) -> bool:
    """A hoisted copy of a global vector into a whole local vector v (layernorm's gamma
    into g) that no item writes: element loops over v's length read `v[j]` from the
    global instead, with the global's region added to the run's conditions. True when
    the copy is then not needed (v read neither by the run nor before its next whole
    write after it)."""
    if not isinstance(h, Copy) or h.src.buffer.scope is not Scope.GLOBAL:
        return False
    src, dst = h.src, h.dst
    n = _static(dst.buffer.shape[0]) if dst.buffer.ndim == 1 else None
    if (n is None or not _whole(dst) or src.buffer.ndim != 1 or src.static_extents() != (n,)
            or src.buffer.dtype != dst.buffer.dtype or not _plain(dst.buffer)
            or not _no_loads(src.starts[0])):
        return False
    v = dst.buffer.name
    if any(x.name == v for it in items for st in _item_stmts(it) for x, _ in _stmt_stores(st)):
        return False
    forwarded = False
    for it in items:
        if not isinstance(it, Elem) or it.cols != n:
            continue

        def load(ld: Load, it=it):
            nonlocal forwarded
            if ld.buffer.name == v and ld.indices == (it.j,):
                forwarded = True
                return Load(src.buffer, (_index(src.starts[0], it.j),))
            return ld

        it.body = [_subst_stmt(st, {"@load": load}) for st in it.body]
    if forwarded:
        regions.append(src)
    still = any(ld.buffer.name == v for it in items for st in _item_stmts(it)
                for ld in _stmt_loads(st))
    return forwarded and not still and not needs_zeros(rest, dst.buffer)


def _global_row(v, r: Var, j: Var):
    """(global, row start, col start) when v loads G[s0 + r, s1 + j]."""
    if not isinstance(v, Load) or v.buffer.scope is not Scope.GLOBAL or len(v.indices) != 2:
        return None

    def split(e, var):
        if e == var:
            return Const(0, int32)
        if isinstance(e, Call) and e.op is Op.ADD and e.args[1] == var:
            return e.args[0]
        return None

    s0, s1 = split(v.indices[0], r), split(v.indices[1], j)
    return None if s0 is None or s1 is None else (v.buffer, s0, s1)


def _drop_dead(items: list, rowset: set, live: set) -> bool:
    """Remove the stores into row tiles whose values nothing reads: walking back from the
    end, a tile row is needed when a later item reads it before writing all of it, or
    when it is read after the run (`live`). In an element-wise loop a read later in the
    body was given the stored value by _rewrite, and a read before the store sees the
    element as it was (other iterations touch other elements); a read left in any other
    loop keeps that loop's stores. Whether any store went."""
    needed = set(live)
    dropped = False
    for it in reversed(items):
        reads = {ld.buffer.name for st in _item_stmts(it) for ld in _stmt_loads(st)}
        kills: set = set()
        if isinstance(it, Elem):
            seen = needed if it.elementwise else needed | reads
            keep = [s for s in it.body
                    if not (isinstance(s, Store) and s.buffer.ndim == 2
                            and s.buffer.name in rowset and s.buffer.name not in seen)]
            dropped |= len(keep) != len(it.body)
            # every element of the row, unconditionally, before any read of the old row
            kills = {s.buffer.name for s in it.body if isinstance(s, Store)
                     and s.buffer.ndim == 2 and s.buffer.name in rowset
                     and s.indices == (s.indices[0], it.j)
                     and it.cols == _static(s.buffer.shape[1])
                     and (it.elementwise or s.buffer.name not in reads)}
            it.body = keep
        needed = (needed - kills) | reads
    return dropped


def _store_in_dest(items: list, dead: set, r: Var) -> None:
    """A row tile (dead after the run) written by one element loop and read by one later
    element-wise loop that stores into a global row (the copy out): the first loop stores
    into that global row instead and the second reads the row back there (same dtype, so
    the same values). The global row's cache misses then fall in the first loop, under its
    arithmetic, not in a loop that only moves data: fast softmax's exponentials go
    straight into Y, whose row is then scaled in L1 (docs/perf-log.md). The global is
    read nowhere in the run (_check) and apart from the globals read (Run.apart)."""
    for x in sorted(dead):
        ws = [it for it in items if any(b.name == x for st in _item_stmts(it)
                                        for b, _ in _stmt_stores(st))]
        rs = [it for it in items if any(ld.buffer.name == x for st in _item_stmts(it)
                                        for ld in _stmt_loads(st))]
        if len(ws) != 1 or len(rs) != 1 or not (isinstance(ws[0], Elem)
                                                and isinstance(rs[0], Elem)):
            continue
        a, b = ws[0], rs[0]
        mine = [s for s in a.body if isinstance(s, Store) and s.buffer.name == x]
        dest = _dest_row(items, a, b, mine, r)
        if dest is None:
            continue
        g, s0, s1, at = dest
        put = Store(g, (_index(s0, r), _index(s1, a.j)), mine[0].value, mine[0].loc)
        a.body = [put if s is mine[0] else s for s in a.body]

        def load(ld: Load, j=b.j, x=x, at=at):
            return at if ld.buffer.name == x and ld.indices == (r, j) else ld

        b.body = [_subst_stmt(s, {"@load": load}) for s in b.body]


def _dest_row(items: list, a: Elem, b: Elem, mine: list, r: Var):
    """(global, row start, col start, b's load of it) when a's one store `x[r, j]` (the
    whole row, unconditionally) can go to the global row that b, a later element-wise
    loop with no ifs, stores into, the run's only store into that global; else None."""
    if (items.index(a) >= items.index(b) or not b.elementwise or a.cols != b.cols
            or len(mine) != 1 or mine[0].indices != (r, a.j)
            or a.cols != _static(mine[0].buffer.shape[1])
            or any(isinstance(s, If) for s in a.body + b.body)):
        return None
    out = [s for s in b.body if isinstance(s, Store) and s.buffer.scope is Scope.GLOBAL]
    row = _global_row(Load(out[0].buffer, out[0].indices), r, b.j) if len(out) == 1 \
        else None
    if row is None or row[0].dtype != mine[0].buffer.dtype or not _plain(row[0]):
        return None
    if sum(1 for it in items for st in _item_stmts(it) for t, _ in _stmt_stores(st)
           if t.name == row[0].name) != 1:
        return None
    return (*row, Load(out[0].buffer, out[0].indices))

def _prune(items: list) -> list:
    """Element loops without the lets nothing uses, and without loops left with nothing."""
    out = []
    for it in items:
        if isinstance(it, Elem):
            used: set = set()
            body = []
            for st in reversed(it.body):
                if isinstance(st, Let) and st.var.name not in used:
                    continue
                body.append(st)
                used |= _vars(st)
            it.body = body[::-1]
            if not it.body and not it.pre and not it.post:
                continue
        out.append(it)
    return out


def _vars(s) -> set:
    """Names of the variables a let/store/if reads."""
    out: set = set()

    def visit(e):
        if isinstance(e, Var):
            out.add(e.name)
        elif isinstance(e, Load):
            for i in e.indices:
                visit(i)
        elif isinstance(e, Call):
            for a in e.args:
                visit(a)

    if isinstance(s, Let):
        visit(s.value)
    elif isinstance(s, Store):
        for i in s.indices:
            visit(i)
        visit(s.value)
    elif isinstance(s, If):
        visit(s.cond)
        for t in s.then_body + s.else_body:
            out |= _vars(t)
    return out


# ------------------------------------------------------------------ planning


def plan(launch: Launch) -> dict:
    """(id(body), start) -> Run for every run worth fusing in a launch's block body.

    A run is a sequence of consecutive statements of a block body, or of the body of an
    `if` or a serial loop inside it (tile rows read after the run, by what follows or by
    the loop's next iteration, keep their stores: initfill.py's first-touch analysis),
    each one of:
    - a `T.Parallel(R)` loop of lets and stores, or `T.Parallel(R, C)` whose body holds
      lets, stores and `if`s (no loops);
    - a copy between a whole R x C block-local tile and a tile of the same dtype
      (block-local or a global region), or between two whole R-vectors;
    - a fill of a whole R x C tile or R-vector;
    - a reduce along dim 1 of a whole R x C tile into a whole R-vector: sums merge into
      element loops, max and min stay whole-row reduces (tiles.py's vectorised
      `_extreme`);
    - a copy or fill that touches no row-indexed buffer and nothing the run writes earlier
      (layernorm's `T.copy(gamma, g)`): it runs before the row loop; a copy of a global
      vector that the run only reads is read in place (`g[j]` becomes `gamma[j]`) and not
      run at all when nothing reads its vector later.
    A row's mask loop `for j: if j >= e: ...` is dropped and `select(j < e, a, b)` taken
    as `a` (guards.py's comparisons of the column with a bound e that names neither the
    row nor the loop's lets); the run's condition then includes that the mask selects no
    column and the select every column, as they do on rows that fit the tile. Every access
    to a block-local buffer with R rows must index row `i` (the statement's row), other
    block-local buffers are only read, globals are only reached through copies, no global
    is both read and written, and the block-local buffers are not re-views. A run is kept
    only when it saves a tile store or reads a global tile in place.

    Why the result is the same: each row's statements run in their order, on that row
    only, and rows share nothing, so interleaving rows changes no value. Merged loops keep
    each element's statements in order and touch only their own element (element loops
    whose row tiles are indexed `[i, j]` exactly, without `if`s), and a sum keeps its order
    (k ascending from its start). The fused form runs only when every global tile of the
    run lies inside its array (no edge tile: the defined edge behaviour is the copies')
    and the arrays read do not overlap the arrays written. Exact mode does not fuse by
    default: one row at a time serialises the sums that the exact path interleaves over
    2-16 rows (tiles.py), which is slower there."""
    out: dict = {}
    _ids.fresh = Fresh((launch,), "fuse_")
    _plan_body(launch.body, (), out, reviewed(launch.body))
    return out


def _plan_body(body: tuple, rest: tuple, out: dict, views: set) -> None:
    """Runs in `body` and in the bodies of its ifs and serial loops; `rest`: what may run
    after `body` (a loop's body may run again: `if <again>: body`, then what follows)."""
    k = 0
    while k < len(body):
        s = body[k]
        if isinstance(s, If):
            after = body[k + 1:] + rest
            _plan_body(s.then_body, after, out, views)
            _plan_body(s.else_body, after, out, views)
        elif isinstance(s, While) or (isinstance(s, For) and s.kind is not ForKind.PARALLEL):
            again = If(Var(_fresh("again"), int32), s.body)
            _plan_body(s.body, (again,) + body[k + 1:] + rest, out, views)
        run = _try(body, k, rest, views)
        if run is None:
            k += 1
            continue
        out[(id(body), k)] = run
        k = run.stop


def _try(body: tuple, start: int, rest_after: tuple, views: set) -> Run | None:
    """The longest run from body[start] that is worth fusing, or None; `rest_after`: what
    runs after `body` (for which tiles are still read later)."""
    b = _Items()
    items: list = []
    hoist: list = []
    empty: list = []
    stop = start
    for s in body[start:]:
        it = b.of(s)
        if isinstance(it, Empty):
            empty.append(it.loop)
            stop += 1
            continue
        if it is None:
            if items and _hoistable(s, items):
                hoist.append(s)
                stop += 1
                continue
            break
        items.append(it)
        stop += 1
    while stop > start and hoist and body[stop - 1] is hoist[-1]:
        hoist.pop()  # a trailing hoisted statement simply stays after the run
        stop -= 1
    rows = len(items) + len(empty)
    if rows < 2:
        return None
    for s in hoist:
        if isinstance(s, Copy) and s.src.buffer.scope is Scope.GLOBAL:
            b.gread.add(s.src.buffer)
    rowset = _check(items, b.r, b.gread, b.gwritten, views)
    if rowset is None:
        return None
    rest = body[stop:] + rest_after
    bufs = {ld.buffer.name: ld.buffer for it in items for st in _item_stmts(it)
            for ld in _stmt_loads(st)}
    bufs.update({x.name: x for it in items for st in _item_stmts(it) for x, _ in _stmt_stores(st)})
    live = {n for n in rowset if needs_zeros(rest, bufs[n])}  # read before all rewritten
    items = _merge(items)
    _rewrite(items, b.r, rowset)
    dropped = _drop_dead(items, rowset, live)
    _store_in_dest(items, rowset - live, b.r)
    hoist = [h for h in hoist if not _forward_vector(h, items, rest, b.regions)]
    items = _prune(items)
    if not (dropped or b.regions or _beyond_l1(rowset, bufs)):
        # no tile store saved, no global tile read in place, every tile in L1: merging
        # loops over tiles that stay in cache is slower alone (docs/perf-log.md)
        return None
    stmts: list = [Alloc(a) for a in b.accs]
    for it in items:
        if isinstance(it, Elem):
            stmts += it.pre
            stmts.append(For(it.j, Const(0, int32), Const(it.cols, int32), Const(1, int32),
                             ForKind.SERIAL, tuple(it.body)))
            stmts += it.post
        else:
            stmts += it.stmts
    stmts = _rename_lets(stmts)
    loop = For(b.r, Const(0, int32), Const(b.rows, int32), Const(1, int32), ForKind.SERIAL,
               tuple(stmts), loc=body[start].loc)
    # every global access left is a copy's element or a forwarded one, [s0 + r, s1 + j]
    # with r, j inside the tile: inside the array wherever the regions are (what the
    # Versioned statement promises its emitter)
    apart = [(g, h) for g in sorted(b.gread, key=lambda x: x.name)
             for h in sorted(b.gwritten, key=lambda x: x.name)]
    return Run(start, stop, tuple(hoist), loop, b.regions, apart, empty, b.full)


L1_BYTES = 32 << 10  # a core's L1 data cache (Zen 4, most x86 cores): 32 KiB


def _beyond_l1(rowset: set, bufs: dict) -> bool:
    """A row-indexed 2-d tile of the run is larger than L1: unfused, every statement
    streams it from L2 again, while a fused row stays in L1 between its statements (flash
    attention's 256 x 256 scores: max, exp and sum; docs/perf-log.md)."""
    for n in rowset:
        b = bufs.get(n)
        shape = b.static_shape() if b is not None else None
        if shape is not None and len(shape) == 2 and \
                shape[0] * shape[1] * max(b.dtype.bits // 8, 1) > L1_BYTES:
            return True
    return False


def _rename_lets(stmts: list) -> list:
    """The fused statements with the user's lets renamed: the unfused statements, kept
    next to them, bind those names already (every name is bound once)."""
    made = _ids.fresh.made
    m = {t.var.name: Var(_fresh("v"), t.var.dtype) for t in walk(tuple(stmts))
         if isinstance(t, Let) and t.var.name not in made}
    if not m:
        return stmts
    rename = lambda e: m.get(e.name, e) if isinstance(e, Var) else e
    return [map_exprs(t, rename) for t in stmts]


# ------------------------------------------------------------------ the pass


def run(func: PrimFunc) -> PrimFunc:
    """Every planned run of every launch as `Versioned(cond, apart, fused, unfused)`."""
    def launch(s):
        if not isinstance(s, Launch):
            return s
        runs = plan(s)
        return with_bodies(s, lambda b: _apply(b, runs)) if runs else s

    return map_body(func, lambda body: tuple(launch(s) for s in body))


def _apply(body: tuple, runs: dict) -> tuple:
    """body with its runs versioned, and the runs inside its statements' bodies."""
    out, k = [], 0
    while k < len(body):
        r = runs.get((id(body), k))
        if r is not None:
            fused = r.hoisted + (r.loop,)  # its global accesses are those _condition bounds
            out.append(Versioned(_condition(r), tuple(r.apart), fused, body[r.start:r.stop],
                                 "fusion", global_accesses(fused), loc=body[r.start].loc))
            k = r.stop
            continue
        out.append(with_bodies(body[k], lambda b: _apply(b, runs)))
        k += 1
    return tuple(out)


def _condition(r: Run):
    """Where the fused form may run (the arrays' disjointness is the Versioned's `apart`):
    every global region inside its array, every dropped mask selecting no column, every
    select taken as true selecting every column."""
    conds = []
    for reg in r.regions:
        for d, (st, ext) in enumerate(zip(reg.starts, reg.extents)):
            x = _i64(st)
            end = Call(Op.ADD, (x, _i64(ext)), int64)
            conds += [Call(Op.GE, (x, Const(0, int64)), bool_),
                      Call(Op.LE, (end, _i64(reg.buffer.shape[d])), bool_)]
    for loop in r.empty:
        lo, hi, _ = narrowed(loop)
        conds.append(Call(Op.GE, (lo, hi), bool_))
    for loop in r.full:
        lo, hi, _ = narrowed(loop)
        conds += [Call(Op.LE, (lo, Const(0, int64)), bool_),
                  Call(Op.GE, (hi, _i64(loop.stop)), bool_)]
    out = None
    for c in dict.fromkeys(conds):  # each condition once, in order
        out = c if out is None else Call(Op.AND, (out, c), bool_)
    return Const(True, bool_) if out is None else out

