"""The runtime sanitizers: bounds, uninitialised reads of block-local memory, global races.

Owns the checks and the error messages (block id, buffer, element index, the user's line).
It never changes a buffer's data; it only reads index arrays and its own bookkeeping.
"""

from __future__ import annotations

import numpy as np

from tilepy.interpreter.state import Ctx
from tilepy.ir.errors import HINT_OOB, OutOfBoundsError, RaceError, UninitializedReadError
from tilepy.ir.expr import Buffer
from tilepy.ir.types import Scope


def _fmt_index(idx) -> str:
    return ", ".join(str(int(i)) for i in idx)


def _first_true(a: np.ndarray) -> tuple[int, ...]:
    return tuple(int(x) for x in np.unravel_index(int(np.argmax(a.reshape(-1))), a.shape))


def check_bounds(ctx: Ctx, buf: Buffer, idx: list[np.ndarray], shape, active, what: str):
    """Raise OutOfBoundsError for the first active lane whose index is outside `shape`.

    `idx` are index arrays broadcast to one lane shape (axis 0 = batch position); `active`
    is a bool array of that shape or None (all lanes)."""
    bad = None
    for i, n in zip(idx, shape):
        lo, hi = (i.min(), i.max()) if i.size else (0, 0)
        if lo < 0 or hi >= n:
            b = (i < 0) | (i >= n)
            bad = b if bad is None else bad | b
    if bad is None:
        return
    if active is not None:
        bad = bad & active
    if not bad.any():
        return
    lane = _first_true(bad)
    got = tuple(int(i[lane]) for i in idx)
    raise_oob(ctx, buf, got, shape, what, lane[0] if len(lane) else 0)


def raise_oob(ctx: Ctx, buf: Buffer, index, shape, what: str, pos: int):
    dims = [d for d, (i, n) in enumerate(zip(index, shape)) if not 0 <= i < n]
    d = dims[0] if dims else 0
    raise OutOfBoundsError(
        f"{ctx.block_name(pos)}: out-of-bounds {what} of {buf.name}[{_fmt_index(index)}]: "
        f"expected 0 <= index < {shape[d]} in dimension {d} of {buf.name} "
        f"(shape {tuple(shape)}); got {index[d]}",
        loc=ctx.loc, hint=HINT_OOB,
    )


# ---------------------------------------------------------------- uninitialised reads


def init_flags(ctx: Ctx, buf: Buffer) -> np.ndarray | None:
    """The written-flags of a local buffer (batch axis first), or None when not tracked
    (globals, sanitize=False, or every element already written)."""
    if not ctx.shared.sanitize or buf.scope is Scope.GLOBAL:
        return None
    flags = ctx.init.get(buf.root.name)
    if flags is None:
        return None
    return flags.reshape(ctx.storage(buf).shape)


def mark_written(ctx: Ctx, buf: Buffer, target, active=None) -> None:
    """Record that the `target` elements (where `active`, if given) were written."""
    flags = init_flags(ctx, buf)
    if flags is None:
        return
    target.set(flags, True if active is None else target.get(flags) | active)
    if flags.all():
        ctx.init[buf.root.name] = None


def check_init(ctx: Ctx, buf: Buffer, target, active) -> None:
    """Raise UninitializedReadError if an active lane reads a never-written element."""
    flags = init_flags(ctx, buf)
    if flags is None:
        return
    bad = ~target.get(flags)
    if active is not None:
        bad = bad & np.broadcast_to(active, bad.shape)
    if not bad.any():
        return
    lane = _first_true(bad)
    flat = int(np.broadcast_to(target.flat_index(flags.shape), bad.shape)[lane])
    pos, *index = np.unravel_index(flat, flags.shape)
    raise UninitializedReadError(
        f"{ctx.block_name(int(pos))}: read of {buf.name}[{_fmt_index(index)}] "
        f"({buf.scope} memory) before anything wrote it: expected a written element; got "
        f"an uninitialised one",
        loc=ctx.loc,
        hint=f"initialise {buf.name} first (T.clear, T.fill or T.copy into it), or pass "
             f"clear_accum=True / clear=True",
    )


# ---------------------------------------------------------------- races


def check_race(ctx: Ctx, buf: Buffer, target, lin_ids: np.ndarray, active=None) -> None:
    """Record that blocks `lin_ids` (broadcast to the target's shape) write the `target`
    elements of a global (where `active`, if given; the target is then disjoint); raise
    RaceError if another block wrote one of them before, or writes it in this statement."""
    if not ctx.shared.sanitize:
        return
    writers, fresh = ctx.writer_array(buf)
    if fresh and active is None:
        target.set(writers, lin_ids)  # nothing written before: no earlier writer to find
    else:
        before = target.get(writers)
        bad = (before != -1) & (before != lin_ids)
        if active is not None:
            bad &= active
        if bad.any():
            _raise_race(ctx, buf, writers, target, before, bad, lin_ids)
        target.set(writers, lin_ids if active is None else np.where(active, lin_ids, before))
    if target.disjoint():
        return
    after = target.get(writers)
    bad = after != lin_ids
    if bad.any():
        _raise_race(ctx, buf, writers, target, after, bad, lin_ids)


def _raise_race(ctx, buf, writers, target, seen, bad, lin_ids):
    """Name the first two blocks (in block order) that write the first bad element."""
    lane = _first_true(np.broadcast_to(bad, seen.shape))
    flat = np.broadcast_to(target.flat_index(writers.shape), seen.shape)
    elem = int(flat[lane])
    ids = np.broadcast_to(lin_ids, seen.shape)[flat == elem]
    ids = np.unique(np.concatenate([ids, [int(seen[lane])]]))
    a, b = int(ids[0]), int(ids[-1 if len(ids) < 2 else 1])
    where = _fmt_index(np.unravel_index(elem, writers.shape))
    raise RaceError(
        f"{ctx.name_of_lin(b)} writes {buf.name}[{where}], which {ctx.name_of_lin(a)} also "
        f"writes: expected each global element to be written by at most one block; got two "
        f"writers without an atomic",
        loc=ctx.loc,
        hint="give each block its own output tile, or use T.atomic_add to accumulate",
    )
