"""The data-movement tile ops: T.copy, T.fill / T.clear, T.atomic_add and the
thread-level front end's fetch-and-add.

Owns their semantics over a batch of blocks: conversion on copy is a store (rounded once
to the destination dtype), atomic adds run in block order then program order (then lane
order inside T.Parallel). Additions go through the op table; nothing here defines an op.
"""

from __future__ import annotations

import numpy as np

from tilepy.interpreter import access, regions, sanitize
from tilepy.interpreter.evaluate import evaluate, index_forms
from tilepy.interpreter.state import Ctx
from tilepy.interpreter.targets import Key
from tilepy.ir.errors import KernelRuntimeError, TileTypeError
from tilepy.ir.expr import Region
from tilepy.ir.ops import Op, reference
from tilepy.ir.stmt import AtomicAdd, Copy, FetchAdd, Fill
from tilepy.ir.types import compute_dtype


def _reshape(ctx: Ctx, vals: np.ndarray, src: regions.Tile, dst: regions.Tile) -> np.ndarray:
    if int(np.prod(src.ext)) != int(np.prod(dst.ext)):
        raise TileTypeError(
            f"T.copy between tiles of different shapes: expected {src.buf.name}'s tile "
            f"{src.ext} to match {dst.buf.name}'s tile {dst.ext} (unit dimensions aside); "
            f"got {int(np.prod(src.ext))} vs {int(np.prod(dst.ext))} elements",
            loc=ctx.loc, hint="make both sides of the copy the same tile shape")
    return vals.reshape((vals.shape[0],) + dst.ext)


def convert(raw: np.ndarray, src, dst) -> np.ndarray:
    """Stored values of dtype `src` as stored values of `dst` (a store: one rounding)."""
    if src == dst:
        return raw
    return access.to_storage(access.to_compute(raw, src), src, dst)


def copy(ctx: Ctx, s: Copy, sel, mask) -> None:
    src = regions.resolve(ctx, s.src, sel)
    dst = regions.resolve(ctx, s.dst, sel)
    vals = regions.read(ctx, src)
    vals = convert(vals, s.src.buffer.dtype, s.dst.buffer.dtype)
    regions.write(ctx, dst, _reshape(ctx, vals, src, dst))


def fill(ctx: Ctx, s: Fill, sel, mask) -> None:
    dst = regions.resolve(ctx, s.dst, sel, op="fill")
    v = np.asarray(evaluate(ctx, s.value, None))
    v = access.to_storage(v, s.value.dtype, s.dst.buffer.dtype)
    if v.size != 1:
        v = np.broadcast_to(v.reshape(-1), (ctx.B,))[dst.pos]
    v = v.reshape((-1,) + (1,) * len(dst.ext))
    regions.write(ctx, dst, v)


# ---------------------------------------------------------------- atomic add


def atomic_add(ctx: Ctx, s: AtomicAdd, sel, mask) -> None:
    """dst += value. Region values, or a scalar broadcast over a region, are added block by
    block (ascending); a scalar into one element is vectorised over T.Parallel lanes."""
    ext = _static_ext(ctx, s.dst)
    if not isinstance(s.value, Region) and all(e == 1 for e in ext):
        return _atomic_elements(ctx, s, mask)
    pos = np.arange(ctx.B) if sel is None else sel
    for p in pos:  # block order
        one = np.asarray([p])
        dst = regions.resolve(ctx, s.dst, one, op="atomic_add")
        dt = s.dst.buffer.dtype
        if isinstance(s.value, Region):
            src = regions.resolve(ctx, s.value, one, op="atomic_add")
            vals = convert(regions.read(ctx, src), s.value.buffer.dtype, dt)
            vals = _reshape(ctx, vals, src, dst)
        else:
            v = np.asarray(evaluate(ctx, s.value, None))
            v = v.reshape(-1)[p if v.size > 1 else 0]
            vals = np.broadcast_to(access.to_storage(v, s.value.dtype, dt), (1,) + dst.ext)
        cur = access.to_compute(regions.read(ctx, dst), dt)
        new = reference(Op.ADD, [cur, access.to_compute(np.asarray(vals), dt)], (dt, dt), dt)
        regions.write(ctx, dst, access.to_storage(new, dt, dt), atomic=True)


def _static_ext(ctx: Ctx, r: Region) -> tuple[int, ...]:
    return tuple(int(np.asarray(evaluate(ctx, e, None)).reshape(-1)[0]) for e in r.extents)


def _atomic_elements(ctx: Ctx, s: AtomicAdd, mask) -> None:
    buf, dt = s.dst.buffer, s.dst.buffer.dtype
    forms = index_forms(ctx, s.dst.starts, mask)
    value = access.to_compute(
        access.to_storage(evaluate(ctx, s.value, mask), s.value.dtype, dt), dt)
    arr = ctx.storage(buf)
    local = not ctx.is_global(buf)
    shape = arr.shape[1:] if local else arr.shape
    shp, key, active, _ = access.general_key(ctx, buf, forms, mask, shape, "write")
    value = np.broadcast_to(ctx.pad(value), shp)
    if active is not None:
        key, value = tuple(k[active] for k in key), value[active]
    key = tuple(np.ravel(k) for k in key)
    value = np.ravel(value)
    if _wraps(dt, arr):  # wrapping integer adds: any order, one step
        if local:
            sanitize.check_init(ctx, buf, Key(key), None)
        u = np.dtype(f"u{arr.dtype.itemsize}")
        np.add.at(arr.view(u), key, access.to_storage(value, dt, dt).astype(arr.dtype).view(u))
        if local:
            sanitize.mark_written(ctx, buf, Key(key))
        return
    flat = np.ravel_multi_index(key, arr.shape)
    for lanes in _rounds(flat):  # lanes in order; no element twice within a round
        k = tuple(x[lanes] for x in key)
        if local:
            sanitize.check_init(ctx, buf, Key(k), None)
        cur = access.to_compute(arr[k], dt)
        new = reference(Op.ADD, [cur, value[lanes].astype(compute_dtype(dt))], (dt, dt), dt)
        if local:
            sanitize.mark_written(ctx, buf, Key(k))
        arr[k] = access.to_storage(new, dt, dt)


def _wraps(dt, arr: np.ndarray) -> bool:
    """Integers stored whole in a numpy integer type: their adds wrap, so associate."""
    return dt.name in _WHOLE_INTS and arr.dtype == np.dtype(dt.name)


_WHOLE_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _rounds(flat: np.ndarray):
    """Lane groups such that each element's additions keep lane order across groups."""
    order = np.argsort(flat, kind="stable")
    sf = flat[order]
    start = np.r_[0, np.flatnonzero(sf[1:] != sf[:-1]) + 1] if sf.size else np.zeros(0, int)
    rank = np.empty(sf.size, dtype=np.int64)
    rank[order] = np.arange(sf.size) - np.repeat(start, np.diff(np.r_[start, sf.size]))
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        yield np.flatnonzero(rank == r)


# ---------------------------------------------------------------- fetch-and-add


def fetch_add(ctx: Ctx, s: FetchAdd, sel, mask) -> None:
    """old = dst; dst += value on one per-block element, lanes in lane order: each lane's
    old value is dst after the adds of the lanes before it (integers: one prefix sum per
    element; floats: one rounded add per lane, in rounds as `_atomic_elements`)."""
    buf, dt = s.dst.buffer, s.dst.buffer.dtype
    arr = ctx.storage(buf)
    shp, key, active, _ = access.general_key(
        ctx, buf, index_forms(ctx, s.dst.starts, mask), mask, arr.shape[1:], "write")
    value = access.to_compute(access.to_storage(
        evaluate(ctx, s.value, mask), s.value.dtype, dt), dt)
    pick = (lambda a: np.broadcast_to(a, shp)[active]) if active is not None else \
        (lambda a: np.ravel(np.broadcast_to(a, shp)))
    key = tuple(pick(k) for k in key)
    v = pick(ctx.pad(value))
    sanitize.check_init(ctx, buf, Key(key), None)
    flat = np.ravel_multi_index(key, arr.shape)
    old = (_int_prefix if _wraps(dt, arr) else _float_rounds)(arr, key, flat, v, dt)
    sanitize.mark_written(ctx, buf, Key(key))
    if s.distinct:
        _check_distinct(ctx, s, key[0], old)
    full = np.zeros(shp, dtype=arr.dtype)
    if active is None:
        full = old.reshape(shp)
    else:
        full[active] = old
    access.store(ctx, s.old.buffer, index_forms(ctx, s.old.starts, mask),
                 access.to_compute(full, dt), dt, mask)


def _int_prefix(arr, key, flat, v, dt) -> np.ndarray:
    """Integer adds wrap, so they associate: each lane's old value is its element's start
    plus the exclusive prefix sum of the values of the earlier lanes on that element."""
    wide = np.uint64 if dt.np_dtype.kind == "u" else np.int64
    order = np.argsort(flat, kind="stable")
    sf, vs = flat[order], v[order].astype(wide)
    first = np.r_[True, sf[1:] != sf[:-1]] if sf.size else np.zeros(0, bool)
    inc = np.cumsum(vs, dtype=wide)
    start = np.maximum.accumulate(np.where(first, np.arange(sf.size), 0))
    within = inc - vs - (inc[start] - vs[start])
    k_sorted = tuple(x[order] for x in key)
    base = arr[k_sorted].astype(wide)
    old = np.empty(sf.size, dtype=arr.dtype)
    old[order] = (base + within).astype(arr.dtype)
    last = np.r_[first[1:], True] if sf.size else first
    kl = tuple(x[last] for x in k_sorted)
    arr[kl] = (base[last] + within[last] + vs[last]).astype(arr.dtype)
    return old


def _float_rounds(arr, key, flat, v, dt) -> np.ndarray:
    """One rounded add per lane (floats, and integers narrower than their storage)."""
    old = np.empty(flat.size, dtype=arr.dtype)
    for lanes in _rounds(flat):
        k = tuple(x[lanes] for x in key)
        cur = arr[k]
        old[lanes] = cur
        new = reference(Op.ADD, [access.to_compute(cur, dt),
                                 v[lanes].astype(compute_dtype(dt))], (dt, dt), dt)
        arr[k] = access.to_storage(new, dt, dt)
    return old


def _check_distinct(ctx: Ctx, s: FetchAdd, pos: np.ndarray, old: np.ndarray) -> None:
    """The program stores at the old values: two lanes of one block with one old value
    would store in an order the vector step does not keep (thread order)."""
    order = np.lexsort((old, pos))
    p, o = pos[order], old[order]
    dup = np.flatnonzero((p[1:] == p[:-1]) & (o[1:] == o[:-1]))
    if dup.size:
        i = int(dup[0])
        raise KernelRuntimeError(
            f"{ctx.block_name(int(p[i]))}: two threads took the value {o[i]} from "
            f"{s.dst.buffer.name} with T.atomic_add(..., return_prev=True) and store at it: "
            "expected each thread's value to differ (slots); got one value twice, whose "
            "stores the interpreter's vector step cannot put in thread order", loc=s.loc,
            hint="make the counters' ranges disjoint, or run this kernel on the JIT, which "
                 "runs the threads one after another")
