"""`print()` and `breakpoint()` inside kernels: what the user sees of a running block.

Owns the printed format (`[block (bx, by)] message values`) and the debugger frame, whose
local variables are the block's buffers (numpy views: edits take effect) and scalars.
Runs only where blocks execute one at a time; it never changes a value itself.
"""

from __future__ import annotations

import builtins

import numpy as np

from tilepy.interpreter.evaluate import evaluate
from tilepy.interpreter.state import Ctx
from tilepy.ir.expr import Buffer


def _positions(ctx: Ctx, mask) -> list[int]:
    if mask is None:
        return list(range(ctx.B))
    m = np.asarray(mask, dtype=bool)
    per_block = m.reshape(m.shape[0], -1).any(axis=1) if m.ndim else np.array([bool(m)])
    return [p for p in range(ctx.B) if per_block[min(p, len(per_block) - 1)]]


def _of_block(ctx: Ctx, v, pos: int, mask):
    """A lane-shaped value restricted to one block (a scalar when it does not vary)."""
    v = np.asarray(v)
    if v.ndim == 0:
        return v[()]
    v = v[min(pos, v.shape[0] - 1)]
    if mask is not None and np.ndim(mask) > 1:
        m = np.asarray(mask)
        m = m[min(pos, m.shape[0] - 1)]
        v = np.broadcast_to(v, np.broadcast_shapes(v.shape, m.shape))[
            np.broadcast_to(m, np.broadcast_shapes(v.shape, m.shape))]
    if v.size == 1:
        return v.reshape(())[()]
    return v if mask is not None and np.ndim(mask) > 1 else np.squeeze(v)


def _buffer_value(ctx: Ctx, buf: Buffer, pos: int) -> np.ndarray:
    arr = ctx.storage(buf)
    return arr if ctx.is_global(buf) else arr[pos]


def print_stmt(ctx: Ctx, s, mask) -> None:
    """Prints `[block ...] msg` per block (in batch order), with each `{}` of the message
    replaced by an argument's value (a lane vector inside T.Parallel, a whole buffer)."""
    values = [a if isinstance(a, Buffer) else evaluate(ctx, a, mask) for a in s.args]
    for pos in _positions(ctx, mask):
        shown = [str(_buffer_value(ctx, a, pos)) if isinstance(a, Buffer)
                 else str(_of_block(ctx, v, pos, mask)) for a, v in zip(s.args, values)]
        if s.msg.count("{}") == len(shown) and "{" in s.msg:
            text = s.msg.format(*shown)
        else:
            text = " ".join([s.msg] + shown) if s.msg else " ".join(shown)
        print(f"[{ctx.block_name(pos)}] {text}")


def block_namespace(ctx: Ctx, pos: int) -> dict:
    """The block's buffers (by kernel name) and scalars, as a debugger sees them."""
    ns: dict = {}
    for p in ctx.shared.func.params:
        ns[p.name] = ctx.storage(p)
    for name, buf in ctx.local_bufs.items():
        ns[name] = _buffer_value(ctx, buf, pos)
    for name, v in ctx.env.items():
        ns[name] = _of_block(ctx, ctx.pad(v), pos, None)
    ns["block_id"] = ctx.block_coords(int(ctx.lin[pos]))
    return ns


def breakpoint_stmt(ctx: Ctx, s, mask) -> None:
    for pos in _positions(ctx, mask):
        ns = block_namespace(ctx, pos)
        line = max(s.loc.line, 1)
        code = compile("\n" * (line - 1) + "breakpoint()", s.loc.file, "exec")
        exec(code, {"__builtins__": builtins, "__name__": "__kernel__"}, ns)
