"""Emitters for the element-wise tile ops: copy, fill, reduce, cumsum, atomic add.

Each becomes plain nested loops over the tile (vectorisable by LLVM); conversions and
combines are emitted through the op table (scalars.Emitter), in the order ir/stmt.py
documents. Gemm lives in gemm.py.
"""

from __future__ import annotations

import numpy as np

from tilepy.ir.errors import LoweringError
from tilepy.ir.expr import Call, Region, Var
from tilepy.ir.ops import Op, round_values
from tilepy.ir.stmt import AtomicAdd, Copy, Cumsum, Fill, Reduce, ReduceKind
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import DType
from tilepy.jit.regions import Side, bind_side, bounds, clip, open_loops, pair, tile_exts
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer


def _close(w: Writer, n: int) -> None:
    w.depth -= n


def emit_copy(em: Emitter, w: Writer, s: Copy) -> None:
    src = bind_side(em, w, s.src, "s")
    dst = bind_side(em, w, s.dst, "d")
    pair(src, dst, "T.copy", em)
    exts = tile_exts(dst, src)
    los, his = bounds(em, w, exts)
    cond = clip(em, w, dst, exts, los, his)
    if src.is_global and not dst.is_global:
        cond = _and(cond, _zero_edges(em, w, src, dst, exts, los, his))
    guarded = src.is_global and dst.is_global
    _under(w, cond)
    depth = w.depth
    t = open_loops(em, w, los, his)
    sidx = src.index(t) if guarded else _unsigned(src.index(t))
    v = em.load(s.src.buffer, sidx) if guarded else em.load_unguarded(s.src.buffer, sidx)
    v = em.cast(v, s.src.dtype, s.dst.dtype)
    for line in em.store(s.dst.buffer, _unsigned(dst.index(t)), v, guarded=False):
        w.line(line)
    w.depth = depth - (1 if cond else 0)


def _unsigned(idx: list[str]) -> list[str]:
    """Indices known to be inside their buffer, as uint64: Numba then drops the
    negative-index wraparound code and the copy loops vectorise (docs/perf-log.md)."""
    return [i if i.isdigit() else f"np.uint64({i})" for i in idx]


def _zero_edges(em, w, src: Side, dst: Side, exts, los, his) -> str | None:
    """A global source's edge tile: the destination elements outside it read 0. Narrows
    the bounds to the source and returns its unit-dims condition."""
    slos, shis = [em.names.temp("lo") for _ in exts], [em.names.temp("hi") for _ in exts]
    for lo, hi, e in zip(slos, shis, exts):
        w.line(f"{lo} = 0")
        w.line(f"{hi} = {e}")
    ok = clip(em, w, src, exts, slos, shis)
    full = [f"{lo} == 0 and {hi} == {e}" for lo, hi, e in zip(slos, shis, exts)]
    if ok:
        full.append(ok)
    w.line(f"if not ({' and '.join(full) or 'True'}):")
    w.depth += 1
    t = open_loops(em, w, ["0"] * len(exts), exts)
    zero = em.cast(em.zero(src.region.dtype), src.region.dtype, dst.region.dtype)
    for line in em.store(dst.region.buffer, dst.index(t), zero, guarded=False):
        w.line(line)
    _close(w, len(exts) + 1)
    for lo, hi, slo, shi in zip(los, his, slos, shis):
        w.line(f"{lo} = max({lo}, {slo})")
        w.line(f"{hi} = min({hi}, {shi})")
    return ok


def _and(a: str | None, b: str | None) -> str | None:
    if a and b:
        return f"{a} and {b}"
    return a or b


def _under(w: Writer, cond: str | None) -> None:
    if cond:
        w.line(f"if {cond}:")
        w.depth += 1


def _each(em: Emitter, w: Writer, side: Side):
    """Open loops over every element of a region (clipped if global); returns the
    indices and the depth to restore."""
    depth = w.depth
    exts = [side.exts[d] for d in side.dims]
    los, his = bounds(em, w, exts)
    _under(w, clip(em, w, side, exts, los, his))
    t = open_loops(em, w, los, his)
    return side.index(t), t, depth


def emit_fill(em: Emitter, w: Writer, s: Fill) -> None:
    dst = bind_side(em, w, s.dst, "d")
    v = em.names.temp("v")
    w.line(f"{v} = {em.cast(em.expr(s.value), s.value.dtype, s.dst.dtype)}")
    idx, _, depth = _each(em, w, dst)
    for line in em.store(s.dst.buffer, _unsigned(idx), v, guarded=False):
        w.line(line)
    w.depth = depth


def emit_atomic_add(em: Emitter, w: Writer, s: AtomicAdd) -> None:
    dst = bind_side(em, w, s.dst, "d")
    dt = s.dst.dtype
    if not isinstance(s.value, Region):
        v = em.names.temp("v")
        w.line(f"{v} = {em.cast(em.expr(s.value), s.value.dtype, dt)}")
        val = None
    else:
        val = bind_side(em, w, s.value, "s")
        pair(val, dst, "T.atomic_add", em)
    if val is None and not dst.dims and dst.is_global and getattr(em, "faults", None):
        # one element (`T.atomic_add(Y[i], v)`): outside Y is a fault, as in the
        # interpreter, not an edge tile to clip
        w.line(f"if {em.global_check(s.dst.buffer, dst.starts, 'write')}:")
        w.depth += 1
        depth = w.depth - 1
    else:
        depth = w.depth
    idx, t, _ = _each(em, w, dst)
    if val is not None:
        v = em.cast(em.load(s.value.buffer, val.index(t)), s.value.dtype, dt)
    log = getattr(em, "logs", {}).get(s.dst.buffer.root.name) if dst.is_global else None
    if log is not None:  # a parallel launch: the add goes to the block's log (atomics.py)
        for line in log.append(em, dst.ref.name, s.dst.buffer.ndim, idx, v,
                               em.faults.blk):
            w.line(line)
        w.depth = depth
        return
    cur = em.load_unguarded(s.dst.buffer, idx)
    total = combine(em, Op.ADD, cur, v, dt)
    for line in em.store(s.dst.buffer, idx, total, guarded=False):
        w.line(line)
    w.depth = depth


def combine(em: Emitter, op: Op, a: str, b: str, dt: DType) -> str:
    """`op(a, b)` in dt, through the op table (a and b are source strings)."""
    saved = dict(em.vars)
    em.vars["_a"], em.vars["_b"] = a, b
    try:
        return em.expr(Call(op, (Var("_a", dt), Var("_b", dt)), dt))
    finally:
        em.vars.clear()
        em.vars.update(saved)


def _abs(em: Emitter, x: str, dt: DType) -> str:
    saved = dict(em.vars)
    em.vars["_a"] = x
    try:
        return em.expr(Call(Op.ABS, (Var("_a", dt),), dt))
    finally:
        em.vars.clear()
        em.vars.update(saved)


_COMBINE = {ReduceKind.SUM: Op.ADD, ReduceKind.ABSSUM: Op.ADD, ReduceKind.MAX: Op.MAX,
            ReduceKind.MIN: Op.MIN, ReduceKind.ABSMAX: Op.MAX}


def emit_reduce(em: Emitter, w: Writer, s: Reduce) -> None:
    src = bind_side(em, w, s.src, "s")
    dst = bind_side(em, w, s.dst, "d")
    if not 0 <= s.dim < s.src.buffer.ndim:
        raise LoweringError(f"reduce: dim {s.dim} is out of range for a {s.src.buffer.ndim}-d "
                            "source", loc=em.loc)
    out_dims = [d for d in src.dims if d != s.dim]
    if len(out_dims) != len(dst.dims):
        raise LoweringError("reduce: the destination's shape does not match the source "
                            f"with dim {s.dim} removed", loc=em.loc)
    if _interleaved(em, w, s, src, dst, out_dims):
        return
    depth = w.depth
    t = open_loops(em, w, ["0"] * len(dst.dims), [dst.exts[d] for d in dst.dims])
    didx = dst.index(t)
    acc = em.names.temp("acc")
    w.line(f"{acc} = {_start(em, s, didx)}")
    lanes = _lanes_call(em, src, s, t, out_dims, acc)
    if lanes is not None:
        w.line(f"{acc} = {lanes}")
        for line in em.store(s.dst.buffer, didx, acc):
            w.line(line)
        w.depth = depth
        return
    k = em.names.temp("k")
    w.line(f"for {k} in range({src.exts[s.dim]}):")
    w.line(f"    {acc} = {_step(em, s, src, acc, t + [k], out_dims)}")
    for line in em.store(s.dst.buffer, didx, acc):
        w.line(line)
    w.depth = depth


def _start(em: Emitter, s: Reduce, didx: list[str]) -> str:
    """The fold's start: the identity in dst's dtype (clear) or dst's element."""
    dt = s.dst.dtype
    if not s.clear:
        return em.load(s.dst.buffer, didx)
    ident = reduce_identity(s.kind, dt)
    return em.const(float(round_values(np.asarray(ident), dt)) if dt.is_float else ident, dt)


def _step(em: Emitter, s: Reduce, src: Side, acc: str, tk: list[str],
          dims: list[int]) -> str:
    """`acc` combined with the source element at tile offsets tk (the reduced dim last)."""
    dt = s.dst.dtype
    x = em.cast(em.load(s.src.buffer, src.index(tk, dims + [s.dim])), s.src.dtype, dt)
    if s.kind in (ReduceKind.ABSSUM, ReduceKind.ABSMAX):
        x = _abs(em, x, dt)
    return combine(em, _COMBINE[s.kind], acc, x, dt)


MAX_INTERLEAVED = 16
FOLDS = "interleaved folds"  # em.notes: see Lowered.slp (jit/lower.py)


def _interleaved(em: Emitter, w: Writer, s: Reduce, src: Side, dst: Side,
                 out_dims: list[int]) -> bool:
    """Sums into 2..16 outputs: one k loop advancing every output's fold, each in its own
    scalar. Each fold keeps its order (k ascending from its start); the folds are
    independent, so the CPU overlaps their adds instead of waiting on one chain. Not in
    fast mode: there fast-math reassociates each output's own loop into vector lanes,
    which the interleaved folds' strided reads keep it from doing."""
    if (em.fast or s.kind not in (ReduceKind.SUM, ReduceKind.ABSSUM) or len(dst.dims) != 1
            or src.ref.kind != "array"
            or s.src.buffer.root.name == s.dst.buffer.root.name):
        return False
    n = dst.exts[dst.dims[0]]
    if not n.isdigit() or not 2 <= int(n) <= MAX_INTERLEAVED:
        return False
    accs = [em.names.temp("acc") for _ in range(int(n))]
    for r, a in enumerate(accs):
        w.line(f"{a} = {_start(em, s, dst.index([str(r)]))}")
    em.notes.add(FOLDS)
    k = em.names.temp("k")
    w.line(f"for {k} in range({src.exts[s.dim]}):  # {n} independent folds")
    for r, a in enumerate(accs):
        w.line(f"    {a} = {_step(em, s, src, a, [str(r), k], out_dims)}")
    for r, a in enumerate(accs):
        for line in em.store(s.dst.buffer, dst.index([str(r)]), a):
            w.line(line)
    return True


_LANES = {ReduceKind.MAX: "True", ReduceKind.MIN: "False"}  # _extreme's want_max


def _lanes_call(em: Emitter, src: Side, s: Reduce, t: list[str], out_dims: list[int],
                acc: str) -> str | None:
    """A float max/min over a block-local array row, as runtime.py's `_extreme` (same bits
    as the serial fold, from integer reductions LLVM vectorises; the fold's chain of
    dependent compares is what made it slow)."""
    dt = s.dst.dtype
    # a global row only where jit/passes/fusion.py proved it inside its array (no edge to clip)
    inside = src.is_global and s.src in getattr(em, "verified", ())
    if (s.kind not in _LANES or not (src.ref.kind == "array" or inside) or src.ref.codec
            or s.src.dtype != dt or dt.name not in ("float32", "float64")):
        return None
    idx = src.index(t, out_dims)
    st, ext = src.starts[s.dim], src.exts[s.dim]
    idx[s.dim] = f":{ext}" if st == "0" else f"{st}:{st} + {ext}"
    fold = "_fextreme" if em.fast else "_extreme"  # fast: one key reduction (jit/fast.py)
    return f"{fold}({src.ref.name}[{', '.join(idx)}], {acc}, {_LANES[s.kind]})"


def emit_cumsum(em: Emitter, w: Writer, s: Cumsum) -> None:
    src = bind_side(em, w, s.src, "s")
    dst = bind_side(em, w, s.dst, "d")
    pair(src, dst, "T.cumsum", em)
    if s.dim not in src.dims:
        raise LoweringError(f"cumsum: dim {s.dim} is not a dimension of the tile",
                            loc=em.loc)
    kpos = src.dims.index(s.dim)
    lines = [d for d in src.dims if d != s.dim]
    dt = s.dst.dtype
    depth = w.depth
    t = open_loops(em, w, ["0"] * len(lines), [src.exts[d] for d in lines])
    acc, k = em.names.temp("acc"), em.names.temp("k")
    w.line(f"{acc} = {em.zero(dt)}")
    n = src.exts[s.dim]
    rng = f"range({n} - 1, -1, -1)" if s.reverse else f"range({n})"
    w.line(f"for {k} in {rng}:")
    w.depth += 1
    tv = list(t)
    tv.insert(kpos, k)
    x = em.cast(em.load(s.src.buffer, src.index(tv)), s.src.dtype, dt)
    w.line(f"{acc} = {combine(em, Op.ADD, acc, x, dt)}")
    for line in em.store(s.dst.buffer, dst.index(tv), acc):
        w.line(line)
    w.depth = depth
