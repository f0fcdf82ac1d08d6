"""The fusion pass: a run of a block's tile statements that each work row by row on the same
rows becomes one loop over the rows, each row's statements in order, adjacent element loops
merged (docs/jit.md). On by default in fast mode, on request in exact mode (`fuse=True`):
the fused form gives the same bits, and runs only where its run-time conditions hold, as
the body of a `Versioned` statement whose fallback is the unfused statements. `plan` says
what qualifies and why. This module plans runs and applies them; fusion_items.py holds the
row items and turns statements into them, fusion_rewrite.py checks and rewrites them.
"""

from __future__ import annotations

from tilepy.ir.expr import Call, Const, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
    Copy,
    For,
    ForKind,
    If,
    Launch,
    Let,
    PrimFunc,
    Versioned,
    While,
    walk,
)
from tilepy.ir.tileops import global_accesses
from tilepy.ir.types import Scope, bool_, int32, int64
from tilepy.jit.passes.fusion_items import (
    Elem,
    Empty,
    Run,
    _fresh,
    _hoistable,
    _ids,
    _item_stmts,
    _Items,
    _stmt_loads,
    _stmt_stores,
)
from tilepy.jit.passes.fusion_rewrite import (
    _check,
    _drop_dead,
    _forward_vector,
    _merge,
    _prune,
    _rewrite,
    _store_in_dest,
)
from tilepy.jit.passes.guards import as_int64 as _i64
from tilepy.jit.passes.guards import narrowed
from tilepy.jit.passes.initfill import needs_zeros, reviewed
from tilepy.jit.passes.rewrite import Fresh, map_body, map_exprs, with_bodies

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

