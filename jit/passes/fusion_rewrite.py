"""The fusion pass's checks and rewrites of a run's row items (jit/passes/fusion.py): that
the items keep to their rows, merging adjacent element loops, forwarding copies of global
rows to their loads, dropping dead row tiles and storing them in their destination.
"""

from __future__ import annotations

from tilepy.ir.expr import Call, Const, Load, Region, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Copy,
    If,
    Let,
    Reduce,
    Store,
)
from tilepy.ir.types import Scope, int32
from tilepy.jit.passes.fusion_items import (
    Elem,
    _fresh,
    _ids,
    _index,
    _item_stmts,
    _local,
    _no_loads,
    _plain,
    _static,
    _stmt_loads,
    _stmt_stores,
    _subst_stmt,
    _whole,
)
from tilepy.jit.passes.initfill import needs_zeros

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


