"""Element loads and stores (`buf[i, j]`), vectorised over blocks and T.Parallel lanes.

Owns how index forms become numpy accesses: a fast path (slices or sliding windows when
every index is `offset + parallel var` or lane-free) and a general gather/scatter with
masks, bounds checks, written-flags and race records. It evaluates no expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.interpreter import masking, sanitize
from tilepy.interpreter.state import Ctx
from tilepy.interpreter.targets import Key, Windows
from tilepy.interpreter.trace import Access
from tilepy.ir.expr import Buffer
from tilepy.ir.ops import cast_values
from tilepy.ir.types import DType, Scope, compute_dtype, float64


@dataclass(frozen=True)
class Lane:
    """Index `offset + v` where v is the T.Parallel variable of lane `axis` (0..n-1)."""

    axis: int
    offset: np.ndarray  # lane-free: 0-d or varying only with the block
    n: int


@dataclass(frozen=True)
class Val:
    """Any other index, already evaluated (an int array broadcastable to the lanes)."""

    value: np.ndarray


# ---------------------------------------------------------------- dtype conversions


def to_compute(raw: np.ndarray, dt: DType) -> np.ndarray:
    """Stored values of `dt` as compute-dtype values (float32 for narrow floats)."""
    cd = compute_dtype(dt)
    return raw if raw.dtype == cd else raw.astype(cd)


def to_storage(v: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Compute values of `src` rounded to `dst` (a store), in dst's storage dtype."""
    if src != dst:
        v = cast_values(np.asarray(v), src, dst)
    v = np.asarray(v)
    return v if v.dtype == dst.np_dtype else v.astype(dst.np_dtype)


# ---------------------------------------------------------------- the fast path


def _lane_free(ctx: Ctx, a: np.ndarray) -> bool:
    return a.ndim <= 1 or all(s == 1 for s in a.shape[1:])


def _block_vector(ctx: Ctx, a: np.ndarray) -> np.ndarray:
    """A lane-free value as a (B,) vector (or 0-d when it is the same for every block)."""
    if a.size == 1:
        return a.reshape(())
    return np.broadcast_to(a.reshape(-1), (ctx.B,))


@dataclass
class _Plan:
    target: object
    batched: bool  # the target's result has a leading batch axis
    lane_axes: list[int]  # lane axis of each kept (windowed) buffer dim, in dim order
    drop: tuple[int, ...]  # result axes to squeeze (dims indexed by a lane-free value)


def _plan(ctx: Ctx, buf: Buffer, forms, shape) -> _Plan | None:
    """A slice/window access for `forms`, or None when the general path is needed (also
    when any lane could be out of bounds: the general path then reports it)."""
    starts, window, lane_axes, drop = [], [], [], []
    for d, f in enumerate(forms):
        if isinstance(f, Lane):
            o, n = _block_vector(ctx, f.offset), f.n
            lane_axes.append(f.axis)
        else:
            if not _lane_free(ctx, f.value):
                return None
            o, n = _block_vector(ctx, f.value), 1
            drop.append(d)
        if o.ndim == 0:
            o = int(o)
            if o < 0 or o + n > shape[d]:
                return None
        elif o.size and (o.min() < 0 or o.max() + n > shape[d]):
            return None
        starts.append(o)
        window.append(n)
    if len(set(lane_axes)) != len(lane_axes):
        return None
    local = buf.scope is not Scope.GLOBAL
    if all(type(s) is int for s in starts):
        key = tuple(
            s if d in drop else slice(s, s + n)
            for d, (s, n) in enumerate(zip(starts, window))
        )
        return _Plan(Key((slice(None),) + key if local else key), local, lane_axes, ())
    lead = (np.arange(ctx.B),) if local else ()
    st = tuple(np.broadcast_to(s, (ctx.B,)) for s in starts)
    target = Windows(tuple(window), lead + st, lead=1 if local else 0)
    return _Plan(target, True, lane_axes, tuple(1 + d for d in drop))


def _to_lanes(ctx: Ctx, arr: np.ndarray, plan: _Plan) -> np.ndarray:
    """A target result (batch?, buffer dims) rearranged to the lane layout."""
    if plan.drop:
        arr = arr.reshape([s for i, s in enumerate(arr.shape) if i not in plan.drop])
    if not plan.batched:
        arr = arr[None]
    order = sorted(range(len(plan.lane_axes)), key=lambda j: plan.lane_axes[j])
    arr = arr.transpose([0] + [1 + j for j in order])
    used = set(plan.lane_axes)
    missing = [a for a in range(1, ctx.depth) if a not in used]
    return np.expand_dims(arr, tuple(missing)) if missing else arr


def _from_lanes(ctx: Ctx, value: np.ndarray, plan: _Plan, out_shape) -> np.ndarray:
    """A lane-layout value rearranged to the target's (batch?, buffer dims) layout."""
    v = np.broadcast_to(value, ctx.lane_shape)
    v = v.transpose([0] + plan.lane_axes)
    if not plan.batched:
        v = v[0]
    return v.reshape(out_shape)


# ---------------------------------------------------------------- loads


def load(ctx: Ctx, buf: Buffer, forms, mask) -> np.ndarray:
    """The values of `buf[forms]` on every lane, in buf's compute dtype."""
    arr = ctx.storage(buf)
    shape = arr.shape[1:] if buf.scope is not Scope.GLOBAL else arr.shape
    if sanitize.init_flags(ctx, buf) is None:
        plan = _plan(ctx, buf, forms, shape)
        if plan is not None:
            _trace_elements(ctx, buf, "load", int(np.prod(ctx.lane_shape[1:])))
            return to_compute(_to_lanes(ctx, plan.target.get(arr), plan), buf.dtype)
    s, key, active, ok = general_key(ctx, buf, forms, mask, shape, "read")
    target = Key(key)
    sanitize.check_init(ctx, buf, target, active)
    _trace_elements(ctx, buf, "load", int(np.prod(s)) if active is None else int(active.sum()))
    if ok is None:
        return to_compute(target.get(arr), buf.dtype)
    safe = safe_value(ctx, buf)
    if arr.size == 0:  # nothing to read: every lane is outside
        return np.broadcast_to(safe, s).copy()
    return np.where(ok, to_compute(target.get(arr), buf.dtype), safe)


def safe_value(ctx: Ctx, buf: Buffer) -> np.ndarray:
    """What an out-of-range load of global `buf` gives (T.annotate_safe_value, else 0),
    as a value of buf's dtype in its compute dtype."""
    v = ctx.shared.func.safe_value(buf.root.name)
    if buf.dtype.is_float:
        return to_compute(np.asarray(cast_values(np.asarray(float(v)), float64, buf.dtype)),
                          buf.dtype)
    return to_compute(np.asarray(v).astype(buf.dtype.np_dtype), buf.dtype)


def _full_index(ctx: Ctx, f) -> np.ndarray:
    if isinstance(f, Val):
        return ctx.pad(f.value)
    ar = np.arange(f.n).reshape((1,) * f.axis + (f.n,) + (1,) * (ctx.depth - f.axis - 1))
    return ctx.pad(f.offset) + ar


def general_key(ctx: Ctx, buf: Buffer, forms, mask, shape, what: str):
    """(lane shape, numpy key, active lanes or None, in-range lanes or None). Block-local
    buffers, and global ones in strict mode, raise for an active lane outside; otherwise
    global lanes outside are inactive (`ok` says which lanes lie inside)."""
    idx = [_full_index(ctx, f) for f in forms]
    local = buf.scope is not Scope.GLOBAL
    parts = idx + ([ctx.bidx()] if local else []) + ([mask] if mask is not None else [])
    shapes = [np.shape(p) for p in parts] + ([ctx.lane_shape] if what == "write" else [])
    s = np.broadcast_shapes(*shapes)
    if not len(s):
        s = (1,)
    idx = [np.broadcast_to(i, s) for i in idx]
    active = None if mask is None else np.broadcast_to(mask, s)
    ok = None
    if local or ctx.shared.strict:
        sanitize.check_bounds(ctx, buf, idx, shape, active, what)
    else:  # TileLang's rule: lanes outside a global buffer are masked off (masking.py)
        ok = masking.in_range(idx, shape)
        if ok is not None:
            masking.note(ctx, buf, idx, ~ok if active is None else active & ~ok, what)
            active = ok if active is None else active & ok
    if active is not None:
        idx = [np.clip(i, 0, max(n - 1, 0)) for i, n in zip(idx, shape)]
    key = ((np.broadcast_to(ctx.bidx(), s),) if local else ()) + tuple(idx)
    return s, key, active, ok


def _trace_elements(ctx: Ctx, buf: Buffer, op: str, n: int) -> None:
    lst = ctx.shared.listener
    if lst is None or buf.scope is not Scope.GLOBAL:
        return
    ev = Access(ctx.block_coords(int(ctx.lin[0])), buf.name, None, None, n,
                n * buf.dtype.itemsize, ctx.loc, op)
    (lst.on_load if op == "load" else lst.on_store)(ev)


# ---------------------------------------------------------------- stores


def store(ctx: Ctx, buf: Buffer, forms, value: np.ndarray, vdt: DType, mask) -> None:
    """`buf[forms] = value` on every active lane (rounded to buf's dtype)."""
    arr = ctx.storage(buf)
    local = buf.scope is not Scope.GLOBAL
    shape = arr.shape[1:] if local else arr.shape
    v = to_storage(value, vdt, buf.dtype)
    if _store_fast(ctx, buf, forms, v, arr, shape, mask):
        return
    s, key, active, _ = general_key(ctx, buf, forms, mask, shape, "write")
    v = np.broadcast_to(ctx.pad(v), s)
    lin = np.broadcast_to(ctx.pad(ctx.lin), s)
    if active is not None:
        key = tuple(k[active] for k in key)
        v, lin = v[active], lin[active]
    target = Key(key)
    if local:
        sanitize.mark_written(ctx, buf, target)
    else:
        sanitize.check_race(ctx, buf, target, lin)
        _trace_elements(ctx, buf, "store", int(np.size(v)))
    target.set(arr, v)


def _store_fast(ctx: Ctx, buf, forms, v, arr, shape, mask) -> bool:
    """Store through slices / windows when every lane maps to its own element. Under a
    mask this is a read-modify-write, so it needs tiles no two blocks share."""
    lanes = sorted(f.axis for f in forms if isinstance(f, Lane))
    if lanes != list(range(1, ctx.depth)):
        return False
    local = buf.scope is not Scope.GLOBAL
    plan = _plan(ctx, buf, forms, shape)
    if plan is None or (not local and not plan.batched and ctx.B > 1):
        return False
    if mask is not None and not local and not plan.target.disjoint():
        return False
    shape_t = plan.target.shape_in(arr)
    vv = _from_lanes(ctx, ctx.pad(v), plan, shape_t)
    active = None
    if mask is not None:
        active = _from_lanes(ctx, ctx.pad(mask), plan, shape_t)
        vv = np.where(active, vv, plan.target.get(arr))
    if local:
        sanitize.mark_written(ctx, buf, plan.target, active)
    else:
        lin = ctx.lin.reshape((-1,) + (1,) * (len(shape_t) - 1)) if plan.batched \
            else ctx.lin[0]
        sanitize.check_race(ctx, buf, plan.target, lin, active)
        n = int(np.prod(ctx.lane_shape[1:])) if active is None else int(active.sum())
        _trace_elements(ctx, buf, "store", n)
    plan.target.set(arr, vv)
    return True
