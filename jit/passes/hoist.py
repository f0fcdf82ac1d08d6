"""The hoist pass: loop-invariant element loads read once, into a `let` before their loop.

`x[i, j] / row_sum[i]` inside `for j` reloads `row_sum[i]` on every iteration, as LLVM
cannot prove the store to `x` leaves `row_sum` alone, and the loop stays scalar; reading it
once first gives the same value and lets the loop vectorise. Decides nothing about values.
"""

from __future__ import annotations

from tilepy.ir.expr import Call, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Alloc, For, Launch, Let, PrimFunc, Store, walk
from tilepy.ir.types import Scope
from tilepy.jit.passes.rewrite import Fresh, map_body, map_exprs, with_bodies

_PREFIX = "hoist_"
# operand positions evaluated only conditionally in the generated Python
_LAZY = {Op.SELECT: (1, 2), Op.AND: (1,), Op.OR: (1,)}


def _written_roots(body) -> set[str]:
    """Roots of the buffers the body writes, and of those it allocates (fresh storage on
    every iteration)."""
    out = {b.root.name for s in walk(body) for b in s.writes()}
    out.update(s.buffer.root.name for s in walk(body) if isinstance(s, Alloc))
    return out


def _bound_inside(loop: For) -> set[str]:
    out = {loop.var.name}
    for s in walk(loop.body):
        if isinstance(s, For):
            out.add(s.var.name)
        elif isinstance(s, Let):
            out.add(s.var.name)
    return out


def _free_vars(e, acc: set[str]) -> bool:
    """Collect e's variables into acc; False if e contains a load."""
    if isinstance(e, Var):
        acc.add(e.name)
        return True
    if isinstance(e, Load):
        return False
    if isinstance(e, Call):
        return all(_free_vars(a, acc) for a in e.args)
    return True


def _eager_loads(e, out: list) -> None:
    """The loads of e that the generated expression always evaluates."""
    if isinstance(e, Load):
        out.append(e)
        for i in e.indices:
            _eager_loads(i, out)
    elif isinstance(e, Call):
        lazy = _LAZY.get(e.op, ())
        for k, a in enumerate(e.args):
            if k not in lazy:
                _eager_loads(a, out)


def runs_at_least_once(loop: For) -> bool:
    parts = (loop.start, loop.stop, loop.step)
    if not all(isinstance(p, Const) for p in parts):
        return False
    start, stop, step = (int(p.value) for p in parts)
    return step > 0 and stop > start


def invariant_loads(loop: For, outer_vars: set[str]) -> list[Load]:
    """The loads of `loop`'s body that can be read once before it, in first-use order,
    without duplicates. A load qualifies when all of these hold, so the program reads the
    same value at the same or an earlier point where the read was going to happen anyway:
    - it sits in a statement of the loop's own body (a Store or Let) that runs on every
      iteration, not under an `if`, not in a conditional operand (the branches of
      `select`, the right side of `and` / `or`), and the loop runs at least once
      (constant bounds);
    - its indices use only variables bound outside the loop, and no loads;
    - no statement anywhere in the loop writes its buffer or a buffer sharing its storage
      (re-views through `T.Tensor(..., buf.data)` are followed to their root)."""
    if not runs_at_least_once(loop):
        return []
    written = _written_roots(loop.body)
    inside = _bound_inside(loop)
    found: list[Load] = []
    for s in loop.body:
        if isinstance(s, Store):
            exprs = [s.value, *s.indices]
        elif isinstance(s, Let):
            exprs = [s.value]
        else:
            continue
        for e in exprs:
            _eager_loads(e, found)
    out: list[Load] = []
    for ld in found:
        if ld in out or ld.buffer.root.name in written:
            continue
        names: set[str] = set()
        if not all(_free_vars(i, names) for i in ld.indices):
            continue
        if names & inside or not names <= outer_vars:
            continue
        out.append(ld)
    return out


# ------------------------------------------------------------------ the pass


def run(func: PrimFunc) -> PrimFunc:
    """Each loop's `invariant_loads` (array loads: a scalar variable's load is a register
    already) as `let hoist_N = load` just before it, and the load as `hoist_N` everywhere
    in the loop (nothing in it writes the buffer)."""
    names = Fresh(func, _PREFIX)
    bound = {v.name for v in func.sizes}
    return map_body(func, lambda body: _body(body, bound, names))


def _body(body: tuple, bound: set, names) -> tuple:
    out, bound = [], set(bound)
    for s in body:
        if isinstance(s, For):
            out += _loop(s, bound, names)
        else:
            inner = bound | ({v.name for v in s.block_vars} if isinstance(s, Launch) else set())
            out.append(with_bodies(s, lambda b, inner=inner: _body(b, inner, names)))
        if isinstance(s, Let):
            bound.add(s.var.name)
    return tuple(out)


def _loop(s: For, bound: set, names) -> list:
    lets, sub = [], {}
    for ld in invariant_loads(s, bound):
        b = ld.buffer
        if b.scope is not Scope.GLOBAL and (b.scope is Scope.VAR or b.ndim == 0):
            continue
        v = Var(names(""), ld.dtype)
        lets.append(Let(v, ld, s.loc))
        sub[ld] = v
    if sub:
        s = with_bodies(s, lambda b: tuple(map_exprs(t, lambda e: sub.get(e, e)) for t in b))
    inner = bound | {s.var.name} | {x.var.name for x in lets}
    return lets + [with_bodies(s, lambda b: _body(b, inner, names))]


def names(func: PrimFunc) -> set[str]:
    """The variables this pass bound in func (for the generated source's comments)."""
    return {s.var.name for s in walk(func.body) if isinstance(s, Let)
            and isinstance(s.value, Load) and s.var.name.startswith(_PREFIX)}
