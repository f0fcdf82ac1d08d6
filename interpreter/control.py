"""Statement execution for a batch of blocks: allocation, bindings, stores, loops, branches.

T.Parallel loops become a lane axis (never a Python loop per element), serial loops Python
loops; lane- or block-varying conditions run predicated under a mask (None: all active).
Tile ops go to their modules; unexpected numpy failures become TilepyErrors at the line.
"""

from __future__ import annotations

import numpy as np

from tilepy.interpreter import access, accumulate, debug, tileops
from tilepy.interpreter.evaluate import (
    always_true,
    and_mask,
    evaluate,
    index_forms,
    mentions_lane,
    pure_index,
)
from tilepy.interpreter.state import Ctx, LaneVar
from tilepy.ir import stmt as S
from tilepy.ir.errors import (
    KernelAssertionError,
    KernelRuntimeError,
    LoweringError,
    TilepyError,
)
from tilepy.ir.tileops import ASSERT_HINT, assert_message, display
from tilepy.ir.types import Scope, compute_dtype

_TILE = {
    S.Copy: tileops.copy, S.Fill: tileops.fill, S.AtomicAdd: tileops.atomic_add,
    S.Gemm: accumulate.gemm, S.Reduce: accumulate.reduce, S.Cumsum: accumulate.cumsum,
    S.FetchAdd: tileops.fetch_add,
}


def run_body(ctx: Ctx, body, mask) -> None:
    for s in body:
        ctx.loc = s.loc
        try:
            _EXEC[type(s)](ctx, s, mask)
        except TilepyError:
            raise
        except (ArithmeticError, ValueError, IndexError, TypeError, MemoryError) as e:
            raise KernelRuntimeError(
                f"running kernel '{ctx.shared.func.name}' failed on this line: "
                f"{type(e).__name__}: {e}", loc=s.loc,
                hint="this looks like an interpreter limitation or a malformed program; "
                     "check the shapes and dtypes used on this line") from e


def _active(mask):
    """None when every lane is active, False when none is, else the mask."""
    if mask is None:
        return None
    if mask.all():
        return None
    return mask if mask.any() else False


# ---------------------------------------------------------------- simple statements


def _alloc(ctx: Ctx, s: S.Alloc, mask) -> None:
    if ctx.depth > 1:
        raise LoweringError(
            f"allocation of {s.buffer.name} inside T.Parallel: expected buffers to be "
            f"allocated at block level; got one per parallel iteration", loc=s.loc,
            hint="move the T.alloc_* call before the T.Parallel loop")
    shape = (ctx.B,) + ctx.static_shape(s.buffer)
    if s.buffer.data is not None and not ctx.is_global(s.buffer):  # a re-view: its storage
        ctx.local[s.buffer.name] = ctx.storage(s.buffer.data).reshape(shape)
    else:
        ctx.local[s.buffer.name] = np.zeros(shape, dtype=s.buffer.dtype.np_dtype)
    ctx.local_bufs[s.buffer.name] = s.buffer
    if s.buffer.data is None and ctx.shared.sanitize and (
            ctx.shared.strict or s.buffer.scope is not Scope.FRAGMENT):
        # a fresh fragment reads as zero, as on the JIT; strict mode reports the read
        ctx.init[s.buffer.name] = np.zeros(shape, dtype=bool)


def _let(ctx: Ctx, s: S.Let, mask) -> None:
    if ctx.lane_vars and pure_index(s.value) and mentions_lane(ctx, s.value):
        ctx.lane_defs[s.var.name] = s.value  # evaluated on first use (often never: indices)
        ctx.env.pop(s.var.name, None)
        return
    v = evaluate(ctx, s.value, mask)
    ctx.env[s.var.name] = v if v.flags.owndata else np.array(v)


def _store(ctx: Ctx, s: S.Store, mask) -> None:
    forms = index_forms(ctx, s.indices, mask)
    value = evaluate(ctx, s.value, mask)
    access.store(ctx, s.buffer, forms, value, s.value.dtype, mask)


def _tile(ctx: Ctx, s, mask) -> None:
    fn = _TILE[type(s)]
    if ctx.depth > 1 and not isinstance(s, (S.AtomicAdd, S.FetchAdd)):
        raise LoweringError(
            f"{display(s)} inside T.Parallel: expected tile operations at block level; "
            f"got one inside a parallel loop", loc=s.loc,
            hint="move the tile operation out of the T.Parallel loop")
    if isinstance(s, S.FetchAdd) or isinstance(s, S.AtomicAdd) and ctx.depth > 1:
        return fn(ctx, s, None, mask)
    sel = None
    if mask is not None:
        sel = np.flatnonzero(np.broadcast_to(mask, (ctx.B,)))
    fn(ctx, s, sel, mask)


# ---------------------------------------------------------------- loops


def _uniform_int(ctx: Ctx, e, mask) -> np.ndarray:
    v = evaluate(ctx, e, mask)
    return v.reshape(()) if v.size == 1 else v


def _for(ctx: Ctx, s: S.For, mask) -> None:
    start, stop = _uniform_int(ctx, s.start, mask), _uniform_int(ctx, s.stop, mask)
    step = _uniform_int(ctx, s.step, mask)
    if step.ndim or int(step) == 0:
        raise KernelRuntimeError(
            f"loop step of '{s.var.name}' must be a nonzero constant over the block; got "
            f"{step.tolist()}", loc=s.loc)
    step = int(step)
    if s.kind is S.ForKind.PARALLEL:
        return _parallel(ctx, s, start, stop, step, mask)
    dt = compute_dtype(s.var.dtype)
    if start.ndim == 0 and stop.ndim == 0:
        for i in range(int(start), int(stop), step):
            ctx.env[s.var.name] = np.asarray(i, dtype=dt)
            run_body(ctx, s.body, mask)
        return
    trips = _trip_count(start, stop, step)
    for it in range(int(trips.max()) if trips.size else 0):
        ctx.env[s.var.name] = (start + it * step).astype(dt)
        m = _active(and_mask(mask, ctx.pad(it < trips)))
        if m is False:
            continue
        run_body(ctx, s.body, m)


def _trip_count(start, stop, step) -> np.ndarray:
    d = stop.astype(np.int64) - start.astype(np.int64)
    return np.maximum(0, -((-d) // step))  # ceil(d / step), either sign of step


def _parallel(ctx: Ctx, s: S.For, start, stop, step, mask) -> None:
    trips = _trip_count(start, stop, step)
    n = int(trips.max()) if trips.size else 0
    if n <= 0:
        return
    axis = ctx.depth
    saved = ctx.lane_shape, dict(ctx.lane_vars), dict(ctx.lane_defs), set(ctx.env)
    ctx.lane_shape = saved[0] + (n,)
    ar = np.arange(n).reshape((1,) * axis + (n,))
    dt = compute_dtype(s.var.dtype)
    st = ctx.pad(start)
    ctx.env[s.var.name] = (st + step * ar).astype(dt)
    ctx.lane_vars[s.var.name] = LaneVar(axis, start.astype(dt), step, n)
    inner = None if mask is None else ctx.pad(mask)
    if trips.ndim:
        inner = _active(and_mask(inner, ar < ctx.pad(trips)))
    try:
        if inner is not False:
            run_body(ctx, s.body, inner)
    finally:
        ctx.lane_shape, ctx.lane_vars, ctx.lane_defs, names = saved
        for name in set(ctx.env) - names:  # lane-shaped bindings end with the loop
            del ctx.env[name]


# ---------------------------------------------------------------- branches


def _if(ctx: Ctx, s: S.If, mask) -> None:
    if ctx.lane_vars and always_true(ctx, s.cond):  # e.g. an edge guard of a full tile
        run_body(ctx, s.then_body, mask)
        return
    _branch(ctx, np.asarray(evaluate(ctx, s.cond, mask), dtype=bool), s.then_body,
            s.else_body, mask)


def _branch(ctx: Ctx, c: np.ndarray, then_body, else_body, mask) -> None:
    """then_body where c holds, else_body elsewhere: one of them for a scalar c, else each
    under its lanes' mask (lanes of a T.Parallel loop, or blocks run side by side)."""
    if c.size == 1:
        run_body(ctx, then_body if bool(c.reshape(())) else else_body, mask)
        return
    m = _active(and_mask(mask, c))
    if m is not False:
        run_body(ctx, then_body, m)
    if else_body:
        m = _active(and_mask(mask, ~c))
        if m is not False:
            run_body(ctx, else_body, m)


def _versioned(ctx: Ctx, s: S.Versioned, mask) -> None:
    """The version a compiled kernel would take: `body` where the condition holds and the
    `apart` arrays' extents do not overlap, else `fallback` (the pass that made them
    guarantees the same values; running either here is how the tests check that)."""
    c = np.asarray(evaluate(ctx, s.cond, mask), dtype=bool)
    if any(np.may_share_memory(ctx.global_array(a), ctx.global_array(b)) for a, b in s.apart):
        c = np.zeros_like(c)
    _branch(ctx, c, s.body, s.fallback, mask)


def _while(ctx: Ctx, s: S.While, mask) -> None:
    """Runs while any lane is active; a lane whose condition was false has left the loop
    for good (its condition is not looked at again)."""
    m = mask
    while True:
        c = np.asarray(evaluate(ctx, s.cond, m), dtype=bool)
        if c.size == 1:
            if not bool(c.reshape(())):
                return
        else:
            m = _active(and_mask(m, c))
            if m is False:
                return
        run_body(ctx, s.body, m)


def _assert(ctx: Ctx, s: S.Assert, mask) -> None:
    """Fails on the lowest block (by linear id) of the batch whose condition is false in
    an active lane, as a compiled launch reports it."""
    c = np.asarray(evaluate(ctx, s.cond, mask), dtype=bool)
    bad = np.broadcast_to(ctx.pad(~c), ctx.lane_shape)
    if mask is not None:
        bad = bad & np.broadcast_to(ctx.pad(mask), ctx.lane_shape)
    failed = bad.reshape(ctx.B, -1).any(axis=1)
    if failed.any():
        pos = int(np.flatnonzero(failed)[np.argmin(ctx.lin[failed])])
        raise KernelAssertionError(assert_message(ctx.block_name(pos), s.msg), loc=s.loc,
                                   hint=ASSERT_HINT)


def _launch(ctx: Ctx, s: S.Launch, mask) -> None:
    raise LoweringError("T.Kernel inside a kernel body: expected launches at the top level; "
                        "got a nested one", loc=s.loc)


_EXEC = {
    S.Alloc: _alloc, S.Let: _let, S.Store: _store, S.For: _for, S.If: _if,
    S.While: _while, S.Launch: _launch, S.Print: debug.print_stmt,
    S.Breakpoint: debug.breakpoint_stmt, S.Versioned: _versioned, S.Assert: _assert,
    **{k: _tile for k in _TILE},
}
