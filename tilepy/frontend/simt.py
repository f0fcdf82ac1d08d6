"""Thread-level (SIMT) kernels, as the front end reads them: `T.get_thread_binding`,
`T.thread_binding`, `T.sync_threads`, warp shuffles and `T.tvm_thread_allreduce`. Thread
indices become variables; barriers and collectives become markers that never leave the
front end: frontend/fission.py turns the launch body into ordinary tile IR.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend import annotations, builtins, exprs
from tilepy.frontend.builtins import Args
from tilepy.frontend.values import describe
from tilepy.frontend.walk import BODIES, children, deep
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Expr, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import Scope, bool_, int32, int64
from tilepy.ir.types import dtype as dtype_of

WARP = 32  # lanes per warp, as on NVIDIA GPUs
_AXES = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}


@dataclass(frozen=True)
class Barrier:
    """`T.sync_threads()`: every thread of the block reaches it before any goes on."""

    loc: Loc
    what: str = "T.sync_threads()"
    partial: bool = False  # `T.sync_threads(id, count)` of fewer threads than the block's


@dataclass(frozen=True)
class Shuffle:
    """A warp shuffle: `result` (a per-thread scalar) gets `value` as the source lane held
    it. kind: "idx" (lane = source lane), "xor" (lane = mask), "down"/"up" (lane = delta)."""

    kind: str
    value: Expr
    lane: Expr
    width: int
    result: Buffer
    loc: Loc
    what: str


@dataclass(frozen=True, eq=False)
class AllReduce:
    """`T.tvm_thread_allreduce`: dest[indices] of every thread gets `combine` folded over
    `value` of the threads that differ from it only along `dims` (ascending thread id)."""

    combine: Callable[[Expr, Expr], Expr]
    value: Expr
    dest: Buffer
    indices: tuple
    dims: tuple[int, ...]
    loc: Loc
    what: str = "T.tvm_thread_allreduce"


@dataclass(frozen=True)
class Vote:
    """A warp vote (kind "any", "all", "ballot": over the lanes of the caller's warp that
    `mask` names) or a block vote ("count", "and", "or": over every thread of the block,
    a barrier too): `result` (a per-thread scalar) gets it."""

    kind: str
    pred: Expr
    mask: Expr | None
    result: Buffer
    loc: Loc
    what: str


MARKERS = (Barrier, Shuffle, AllReduce, Vote)


@dataclass(frozen=True)
class Break:
    """`T.loop_break()`: leaves the innermost loop (lower_breaks turns it into a flag)."""

    loc: Loc


@dataclass
class Reducer:
    """`T.comm_reducer(fn, identity)`: how `T.tvm_thread_allreduce` combines values."""

    params: tuple[str, str]
    body: ast.expr
    identity: list = field(default_factory=list)


def begin_launch(tr, threads: tuple, loc: Loc) -> None:
    """A launch's thread-level state: its thread shape; thread variables, reducers and the
    SIMT flag are set by the first thread-level construct."""
    try:
        threads = tuple(int(t) for t in threads)
    except (TypeError, ValueError):
        threads = ()
    if not threads or len(threads) > 3 or any(t < 1 for t in threads):
        raise TileTypeError(f"T.Kernel: threads= expects 1 to 3 positive ints; got "
                            f"{threads!r}", loc)
    tr.thread_shape = tuple(threads) + (1,) * (3 - len(threads))
    tr.thread_vars, tr.simt, tr.reducers = None, False, []


def thread_vars(tr, loc: Loc) -> tuple[Var, ...]:
    """The launch's thread index variables (made on first use); marks the kernel SIMT."""
    if not tr.in_kernel:
        raise TileSyntaxError("thread indices exist only inside `with T.Kernel(...)`", loc)
    if tr.thread_vars is None:
        tr.thread_vars = tuple(Var(tr.unique(n), int32) for n in ("tx", "ty", "tz"))
    tr.simt = True
    return tr.thread_vars


def linear_id(tr, loc: Loc) -> Expr:
    """tx + nx * (ty + ny * tz): the thread's number in the block."""
    tx, ty, tz = thread_vars(tr, loc)
    nx, ny, _ = tr.thread_shape
    inner = exprs.call(Op.ADD, [ty, exprs.call(Op.MUL, [ny, tz], loc)], loc)
    return exprs.call(Op.ADD, [tx, exprs.call(Op.MUL, [nx, inner], loc)], loc)


def _get_thread_binding(tr, node, loc: Loc, name: str):
    dim = Args(tr, node, ["dim"], loc, "T.get_thread_binding").const("dim", 0)
    if not isinstance(dim, int) or not 0 <= dim < 3:
        raise TileTypeError(f"T.get_thread_binding: expected a thread dimension 0, 1 or 2; "
                            f"got {dim!r}", loc)
    return thread_vars(tr, loc)[dim]


def _thread_binding(tr, node, loc: Loc, name: str):
    """TVMScript's `T.thread_binding(start, stop, thread="threadIdx.x")` (or (stop, thread=)):
    the thread index along that axis, plus start."""
    a = Args(tr, node, ["start", "stop", "thread"], loc, "T.thread_binding")
    start, stop, axis = a.const("start", 0), a.const("stop"), a.const("thread")
    if isinstance(stop, str) and axis is None:
        start, stop, axis = 0, start, stop
    if axis not in _AXES:
        raise TileTypeError(f"T.thread_binding: expected thread= one of {', '.join(_AXES)}; "
                            f"got {axis!r}", loc)
    dim = _AXES[axis]
    var = thread_vars(tr, loc)[dim]
    if stop is not None and int(stop) - int(start) != tr.thread_shape[dim]:
        raise TileTypeError(f"T.thread_binding: {axis} has {tr.thread_shape[dim]} threads in "
                            f"this launch; got a range of {int(stop) - int(start)}", loc,
                            hint="give T.Kernel(..., threads=...) the same extents")
    return var if not start else exprs.call(Op.ADD, [var, int(start)], loc)


def _lane_or_warp(tr, node, loc: Loc, name: str):
    """`T.get_lane_idx()` / `T.get_warp_idx()`: the thread's lane in its warp, its warp."""
    size = Args(tr, node, ["warp_size"], loc, f"T.{name}").const("warp_size", WARP)
    op = Op.MOD if name == "get_lane_idx" else Op.FLOORDIV
    return exprs.call(op, [linear_id(tr, loc), int(size)], loc)


def _sync_threads(tr, node, loc: Loc, name: str):
    a = Args(tr, node, ["barrier_id", "arrive_count"], loc, "T.sync_threads")
    count = a.const("arrive_count")
    total = tr.thread_shape[0] * tr.thread_shape[1] * tr.thread_shape[2]
    if not tr.in_kernel:
        raise TileSyntaxError("T.sync_threads() exists only inside `with T.Kernel(...)`", loc)
    what = "T.sync_threads()" if count is None else f"T.sync_threads(..., {count})"
    partial = count is not None and int(count) != total
    if partial:
        what += f" (a barrier of {count} of the block's {total} threads)"
    tr.emit(Barrier(loc, what, partial))


def drop_barriers(body: tuple) -> tuple:
    """A tile-level kernel (no thread index, shuffle or allreduce) without its
    `T.sync_threads()`: its tile statements already complete in program order, so the
    barriers order nothing more."""
    out = []
    for s in body:
        if isinstance(s, Barrier):
            continue
        if children(s):
            s = dataclasses.replace(s, **{n: drop_barriers(getattr(s, n)) for n in BODIES[type(s)]})
        out.append(s)
    return tuple(out)


# ---------------------------------------------------------------- warp shuffles

# name -> (kind, argument names: value, lane, width, [mask first?])
_SHUFFLES = {
    "tvm_warp_shuffle": ("idx", ["mask", "value", "lane", "width", "warp_size"]),
    "tvm_warp_shuffle_down": ("down", ["mask", "value", "lane", "width", "warp_size"]),
    "tvm_warp_shuffle_up": ("up", ["mask", "value", "lane", "width", "warp_size"]),
    "shfl_sync": ("idx", ["value", "lane", "width", "mask"]),
    "shfl_xor": ("xor", ["value", "lane", "width", "mask"]),
    "shfl_down": ("down", ["value", "lane", "width", "mask"]),
    "shfl_up": ("up", ["value", "lane", "width", "mask"]),
}


def _shuffle(tr, node, loc: Loc, name: str):
    kind, names = _SHUFFLES[name]
    a = Args(tr, node, names, loc, f"T.{name}")
    value = exprs.to_ir(a.value("value"), loc)
    lane = exprs.index_expr(a.value("lane"), loc)
    width = a.const("width", WARP)
    if a.has("warp_size") and a.const("warp_size") != WARP:
        raise TileTypeError(f"T.{name}: expected warp_size {WARP}; got "
                            f"{a.const('warp_size')!r}", loc)
    if not isinstance(width, int) or width < 1 or width > WARP or width & (width - 1):
        raise TileTypeError(f"T.{name}: width must be a power of two from 1 to {WARP}; got "
                            f"{describe(width)}", loc)
    thread_vars(tr, loc)
    result = tr.declare(Buffer(tr.unique("shfl"), (), value.dtype, Scope.VAR), loc)
    tr.emit(Shuffle(kind, value, lane, width, result, loc, f"T.{name}"))
    return Load(result, ())


# ---------------------------------------------------------------- votes

# name -> (kind, result dtype, takes a mask)
_VOTES = {"any_sync": ("any", "int32", True), "all_sync": ("all", "int32", True),
          "ballot_sync": ("ballot", "uint64", True), "ballot": ("ballot", "uint64", False),
          "syncthreads_count": ("count", "int32", False),
          "syncthreads_and": ("and", "int32", False), "syncthreads_or": ("or", "int32", False)}
FULL_MASK = 0xFFFFFFFF


def _vote(tr, node, loc: Loc, name: str):
    """`T.any_sync(pred, mask=0xFFFFFFFF)` and the other votes (TileLang's argument order:
    the predicate first)."""
    kind, dtype, masked = _VOTES[name]
    a = Args(tr, node, ["predicate", "mask"] if masked else ["predicate"], loc, f"T.{name}")
    pred = exprs.as_bool(a.value("predicate"), loc)
    mask = None
    if kind in ("any", "all", "ballot"):
        raw = a.value("mask") if masked and a.has("mask") else FULL_MASK
        if exprs.is_ir(raw):  # the low 32 bits, as CUDA's unsigned mask
            mask = exprs.call(Op.BITAND, [exprs.cast(exprs.index_expr(raw, loc), int64, loc),
                                          Const(FULL_MASK, int64)], loc)
        else:
            mask = Const(int(raw) & FULL_MASK, int64)
    thread_vars(tr, loc)
    result = tr.declare(Buffer(tr.unique("vote"), (), dtype_of(dtype), Scope.VAR), loc)
    tr.emit(Vote(kind, pred, mask, result, loc, f"T.{name}"))
    return Load(result, ())


def _activemask(tr, node, loc: Loc, name: str):
    """`T.activemask()`: the lanes of the caller's warp that exist in the block (every
    thread reaches each statement in tilepy's model), as a uint64."""
    Args(tr, node, [], loc, "T.activemask")
    n = tr.thread_shape[0] * tr.thread_shape[1] * tr.thread_shape[2]
    base = exprs.call(Op.SUB, [linear_id(tr, loc), exprs.call(
        Op.BITAND, [linear_id(tr, loc), WARP - 1], loc)], loc)
    lanes = exprs.call(Op.MIN, [exprs.call(Op.SUB, [n, base], loc), WARP], loc)
    one = Const(1, int64)
    bits = exprs.call(Op.SUB, [exprs.call(Op.SHL, [one, exprs.cast(lanes, int64, loc)], loc),
                               one], loc)
    return exprs.cast(bits, dtype_of("uint64"), loc)


# ---------------------------------------------------------------- allreduce


def _comm_reducer(tr, node, loc: Loc, name: str):
    """`T.comm_reducer(lambda x, y: x + y, [identity])`: kept to combine values later."""
    if not node.args or not isinstance(node.args[0], ast.Lambda):
        raise TileTypeError("T.comm_reducer expects a lambda of two values, e.g. "
                            "`lambda x, y: x + y`", loc)
    lam = node.args[0]
    params = [p.arg for p in lam.args.args]
    if len(params) != 2:
        raise TileTypeError(f"T.comm_reducer's lambda takes two values; got {len(params)}",
                            loc)
    return Reducer((params[0], params[1]), lam.body)


def combine_fn(tr, reducer: Reducer, loc: Loc):
    """fn(a, b): the reducer's lambda body translated with its two names bound."""
    def fn(a: Expr, b: Expr) -> Expr:
        tr.scopes.append({reducer.params[0]: (a, 0), reducer.params[1]: (b, 0)})
        try:
            return exprs.to_ir(tr.expr(reducer.body), loc, like=a.dtype)
        finally:
            tr.scopes.pop()
    return fn


def attr_frame(tr, node: ast.With) -> None:
    """`with T.attr(T.comm_reducer(...), "reduce_scope", ...):` sets the reducer that the
    body's `T.tvm_thread_allreduce` uses; other attributes are hints, run through."""
    call = node.items[0].context_expr
    key = tr.expr(call.args[1]) if len(call.args) > 1 else None
    reducer = tr.expr(call.args[0]) if key == "reduce_scope" else None
    tr.reducers.append(reducer)
    try:
        for st in node.body:
            tr.stmt(st)
    finally:
        tr.reducers.pop()
    if key != "reduce_scope":
        annotations.add_hint(tr, f"T.attr(..., {key!r})")


def _allreduce(tr, node, loc: Loc, name: str):
    """`T.tvm_thread_allreduce(size, value, cond, result[i], *thread_indices)`."""
    if len(node.args) < 5:
        raise TileTypeError("T.tvm_thread_allreduce expects (size, value, cond, result, "
                            "thread indices...)", loc)
    size, cond = tr.expr(node.args[0]), tr.expr(node.args[2])
    if exprs.is_ir(size):
        size = size.value if hasattr(size, "value") else size
    if size != 1 or cond is not True and getattr(cond, "value", None) is not True:
        raise TileTypeError("T.tvm_thread_allreduce: only one value with condition True is "
                            f"supported; got size {describe(size)}, cond {describe(cond)}", loc)
    reducer = next((r for r in reversed(tr.reducers) if r is not None), None)
    if reducer is None:
        raise TileSyntaxError("T.tvm_thread_allreduce needs its reducer: put it inside "
                              "`with T.attr(T.comm_reducer(fn, [identity]), \"reduce_scope\","
                              " ...):`", loc)
    value = exprs.to_ir(tr.expr(node.args[1]), loc)
    dest = tr.value(node.args[3])
    if not isinstance(dest, Load):
        raise TileTypeError(f"T.tvm_thread_allreduce writes its result to an element "
                            f"(`buf[0]`); got {describe(dest)}", loc)
    tv = thread_vars(tr, loc)
    dims = []
    for arg in node.args[4:]:
        v = tr.expr(arg)
        if v not in tv:
            raise TileTypeError("T.tvm_thread_allreduce reduces over thread indices (from "
                                f"T.get_thread_binding); got {describe(v)}", loc)
        dims.append(tv.index(v))
    tr.emit(AllReduce(combine_fn(tr, reducer, loc), value, dest.buffer, dest.indices,
                      tuple(sorted(set(dims))), loc))


def _loop_break(tr, node, loc: Loc, name: str):
    if tr.loop_depth[-1] == 0:
        raise TileSyntaxError("T.loop_break() must be inside a loop", loc)
    tr.emit(Break(loc))


def lower_breaks(tr, body: tuple, loc: Loc, cond=None):
    """A loop body holding `if c: ...; T.loop_break()` at its top level, as statements
    without break: a per-block flag (shared memory, so every thread sees it) is set where
    the break is, and guards the rest of the body and the later iterations (and a while
    loop's condition `cond`: then the result is (body, cond))."""
    if not any(isinstance(s, Break) for s in deep(body)):
        return body if cond is None else (body, cond)
    flag = tr.declare(Buffer(tr.unique("broke"), (Const(1, int32),), int32, Scope.SHARED),
                      loc)
    zero = (Const(0, int32),)
    tr.emit(S.Store(flag, zero, Const(0, int32), loc=loc))
    clear = exprs.call(Op.EQ, [Load(flag, zero), 0], loc)
    body = (S.If(clear, _without_breaks(body, flag, clear), loc=loc),)
    return body if cond is None else (body, exprs.call(Op.AND, [cond, clear], loc))


def _without_breaks(body: tuple, flag: Buffer, clear) -> tuple:
    zero = (Const(0, int32),)
    for i, s in enumerate(body):
        if not any(isinstance(t, Break) for t in deep((s,))):
            continue
        if isinstance(s, Break):
            s = S.If(Const(True, bool_), (s,), loc=s.loc)
        ok = isinstance(s, S.If) and not s.else_body and s.then_body and isinstance(
            s.then_body[-1], Break) and not any(isinstance(t, Break) for t in deep(
                s.then_body[:-1]))
        if not ok:
            where = next(t for t in deep((s,)) if isinstance(t, Break)).loc
            raise TileSyntaxError("T.loop_break() is supported at the end of an `if` at "
                                  "the top level of the loop's body", where,
                                  hint="restructure as `if cond: T.loop_break()`")
        then = s.then_body[:-1] + (S.Store(flag, zero, Const(1, int32), loc=s.loc),)
        rest = _without_breaks(body[i + 1:], flag, clear)
        after = (S.If(clear, rest, loc=s.loc),) if rest else ()
        return body[:i] + (S.If(s.cond, then, loc=s.loc),) + after
    return body


def _evaluate(tr, node, loc: Loc, name: str):
    """`T.evaluate(call)`: the call's effect (TVMScript's expression statement)."""
    for arg in node.args:
        tr.expr(arg)


def _no_value(tr, node, loc: Loc, name: str):
    raise TileSyntaxError(f"T.{name}(...) is only meaningful inside a `with T.attr(...)` of "
                          "a thread-level reduction", loc)


HANDLERS = {"get_thread_binding": _get_thread_binding, "thread_binding": _thread_binding,
            "get_lane_idx": _lane_or_warp, "get_warp_idx": _lane_or_warp,
            "sync_threads": _sync_threads, "tvm_thread_allreduce": _allreduce,
            "comm_reducer": _comm_reducer, "evaluate": _evaluate, "attr": _no_value,
            "loop_break": _loop_break}
HANDLERS.update({n: _shuffle for n in _SHUFFLES})
HANDLERS.update({n: _vote for n in _VOTES}, activemask=_activemask)
builtins.HANDLERS.update(HANDLERS)
NAMES = tuple(HANDLERS)
