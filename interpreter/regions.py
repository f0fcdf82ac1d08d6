"""Reading and writing regions (tiles) of buffers for the tile ops, for a batch of blocks.

Owns the region rules: each element of a global region outside its buffer reads as 0 and
takes no write (an edge tile, a region starting outside, a buffer with a dimension of 0:
TileLang's safe-memory-access rule), any part of a local region outside its buffer is an
error, and the sanitizer bookkeeping of tile accesses. Values stay in storage dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.interpreter import sanitize
from tilepy.interpreter.evaluate import evaluate
from tilepy.interpreter.state import Ctx
from tilepy.interpreter.targets import Key, Windows
from tilepy.interpreter.trace import Access
from tilepy.ir.errors import KernelRuntimeError
from tilepy.ir.expr import Buffer, Region
from tilepy.ir.types import Scope


@dataclass
class Tile:
    """A region resolved for the selected blocks: `starts[d]` is 0-d (same for all) or one
    start per selected block; `ext` are the extents."""

    buf: Buffer
    starts: list[np.ndarray]
    ext: tuple[int, ...]
    pos: np.ndarray  # batch positions of the selected blocks
    op: str = "copy"

    @property
    def n(self) -> int:
        return len(self.pos)

    @property
    def is_global(self) -> bool:
        return self.buf.scope is Scope.GLOBAL


def resolve(ctx: Ctx, r: Region, sel, op: str = "copy") -> Tile:
    """Evaluate a region's starts and extents for the blocks `sel` (None: all)."""
    pos = np.arange(ctx.B) if sel is None else sel
    starts = []
    for s in r.starts:
        v = np.asarray(evaluate(ctx, s, None))
        if v.size != 1:
            v = np.broadcast_to(v.reshape(-1), (ctx.B,))[pos]
        starts.append(v.reshape(()) if v.size == 1 else v)
    ext = []
    for e in r.extents:
        v = np.asarray(evaluate(ctx, e, None))
        if v.size != 1 and not (v == v.reshape(-1)[0]).all():
            raise KernelRuntimeError(
                f"the extents of a region of {r.buffer.name} differ between blocks: expected "
                f"one tile shape; got {sorted(set(v.reshape(-1).tolist()))}", loc=ctx.loc)
        ext.append(int(v.reshape(-1)[0]))
    return Tile(r.buffer, starts, tuple(ext), pos, op)


def _uniform(t: Tile) -> bool:
    return all(s.ndim == 0 for s in t.starts)


def _full_starts(t: Tile) -> tuple:
    return tuple(np.broadcast_to(s, (t.n,)) for s in t.starts)


def _check_starts(ctx: Ctx, t: Tile, shape, local: bool, what: str) -> bool:
    """Raise for any part of a local region outside its buffer. Returns whether the whole
    tile is inside (False: a global tile with elements outside, which read 0)."""
    inside = True
    for d, (s, e, n) in enumerate(zip(t.starts, t.ext, shape)):
        lo, hi = (int(s.min()), int(s.max())) if s.size else (0, 0)
        if local and (lo < 0 or hi >= n or hi + e > n):
            _raise_region(ctx, t, shape, d, local, what)
        if lo < 0 or hi + e > n:
            inside = False
    return inside


def _raise_region(ctx, t: Tile, shape, d, local, what):
    full = _full_starts(t)
    s = full[d]
    bad = (s < 0) | (s >= shape[d]) | ((s + t.ext[d] > shape[d]) if local else False)
    j = int(np.argmax(bad))
    index = [int(x[j]) for x in full]
    index[d] = index[d] if not 0 <= index[d] < shape[d] else shape[d]
    sanitize.raise_oob(ctx, t.buf, tuple(index), tuple(shape), what, int(t.pos[j]))


# ---------------------------------------------------------------- read


def read(ctx: Ctx, t: Tile) -> np.ndarray:
    """The tile's values for each selected block: shape (n, *ext), storage dtype."""
    arr = ctx.storage(t.buf)
    if not t.is_global:
        target = _local_target(ctx, t, arr, "read")
        sanitize.check_init(ctx, t.buf, target, None)
        return target.get(arr)
    inside = _check_starts(ctx, t, arr.shape, False, "read")
    _trace(ctx, t, arr.shape, ctx.shared.listener, "load")
    if inside and _uniform(t):
        key = tuple(slice(int(s), int(s) + e) for s, e in zip(t.starts, t.ext))
        return np.broadcast_to(arr[key][None], (t.n,) + t.ext)
    if inside:
        return Windows(t.ext, _full_starts(t)).get(arr)
    if arr.size == 0:  # a dimension of 0: every element is outside
        return np.zeros((t.n,) + t.ext, arr.dtype)
    idx, valid = _edge_index(t, arr.shape)
    out = arr[idx]
    return np.where(valid, out, np.zeros((), out.dtype))


def _edge_index(t: Tile, shape):
    """Clipped open-grid indices (n, ..., e_d, ...) and the in-range mask of a tile with
    elements outside its buffer."""
    nd = len(t.ext)
    idx, valid = [], True
    for d, (s, e) in enumerate(zip(_full_starts(t), t.ext)):
        i = s.astype(np.int64).reshape((t.n,) + (1,) * nd) + np.arange(e).reshape(
            (1,) + (1,) * d + (e,) + (1,) * (nd - d - 1))
        valid = valid & (i >= 0) & (i < shape[d])
        idx.append(np.clip(i, 0, max(shape[d] - 1, 0)))
    return tuple(idx), np.broadcast_to(valid, (t.n,) + t.ext)


def _local_target(ctx: Ctx, t: Tile, arr, what: str):
    _check_starts(ctx, t, arr.shape[1:], True, what)
    if _uniform(t):
        lead = slice(None) if len(t.pos) == ctx.B else t.pos
        key = tuple(slice(int(s), int(s) + e) for s, e in zip(t.starts, t.ext))
        return Key((lead,) + key)
    return Windows(t.ext, (t.pos,) + _full_starts(t), lead=1)


# ---------------------------------------------------------------- write


def write(ctx: Ctx, t: Tile, values: np.ndarray, atomic: bool = False) -> None:
    """Store `values` (n, *ext) of t.buf's storage dtype into the tile of each block."""
    arr = ctx.storage(t.buf)
    values = np.broadcast_to(values, (t.n,) + t.ext)
    if not t.is_global:
        target = _local_target(ctx, t, arr, "write")
        sanitize.mark_written(ctx, t.buf, target)
        target.set(arr, values)
        return
    inside = _check_starts(ctx, t, arr.shape, False, "write")
    _trace(ctx, t, arr.shape, ctx.shared.listener, "store")
    lin = ctx.lin[t.pos].reshape((t.n,) + (1,) * len(t.ext))
    if inside and _uniform(t) and t.n == 1:
        key = tuple(slice(int(s), int(s) + e) for s, e in zip(t.starts, t.ext))
        target, values, lin = Key(key), values[0], lin[0]
    elif inside:
        target = Windows(t.ext, _full_starts(t))
    else:
        idx, valid = _edge_index(t, arr.shape)
        idx = tuple(np.broadcast_to(i, valid.shape)[valid] for i in idx)
        target = Key(idx)
        values, lin = values[valid], np.broadcast_to(lin, valid.shape)[valid]
    if not atomic:
        sanitize.check_race(ctx, t.buf, target, lin)
    target.set(arr, values)


def _trace(ctx: Ctx, t: Tile, shape, listener, kind: str) -> None:
    if listener is None:
        return
    for j in range(t.n):
        starts = tuple(int(np.broadcast_to(s, (t.n,))[j]) for s in t.starts)
        inside = int(np.prod([max(0, min(s + e, n) - max(s, 0))
                              for s, e, n in zip(starts, t.ext, shape)]))
        ev = Access(ctx.block_coords(int(ctx.lin[t.pos[j]])), t.buf.name, starts, t.ext,
                    inside, inside * t.buf.dtype.itemsize, ctx.loc, t.op)
        (listener.on_load if kind == "load" else listener.on_store)(ev)
