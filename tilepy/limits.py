"""Sizes a kernel can run with, checked before any backend runs it, so that every backend
reports the same `SizeError`: block and tile sizes of at least 1, grid extents of at least
0 (0: no block runs, as for an empty input), block-local buffers that fit in this
machine's memory.

`check_built` runs when a Kernel is made (what is known then); `check_call` runs at each
call, for the grid extents and block sizes that depend on the arguments' sizes. It decides
no semantics and never runs a kernel.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

from tilepy.errors import SizeError
from tilepy.ir.expr import Call, Const, Expr, Var
from tilepy.ir.ops import Op
from tilepy.ir.printer import format_expr
from tilepy.ir.stmt import Alloc, Launch, Let, PrimFunc, walk
from tilepy.ir.types import compute_dtype

_DIVIDES = (Op.FLOORDIV, Op.MOD)
_HINT_BLOCK = "check the block-size arguments the kernel was built with"


def _divisors(e: Expr):
    """The divisors of every `//` and `%` in e (T.ceildiv(n, b) is (n + b - 1) // b)."""
    if isinstance(e, Call):
        if e.op in _DIVIDES:
            yield e.args[1]
        for a in e.args:
            yield from _divisors(a)


def _grid_text(s: Launch, d: int) -> str:
    return f"extent {d} of the T.Kernel grid, {format_expr(s.grid[d])},"


# ------------------------------------------------------------------ build time


def check_built(func: PrimFunc) -> None:
    """Raise SizeError for a size known now that no launch can run."""
    for s in func.body:
        if isinstance(s, Launch):
            _check_grid(s)
            _check_buffers(s)


def _check_grid(s: Launch) -> None:
    for d, g in enumerate(s.grid):
        for div in _divisors(g):
            if isinstance(div, Const) and div.value <= 0:
                raise SizeError(f"{_grid_text(s, d)} divides by {div.value}: expected a "
                                "block size of at least 1", loc=s.loc, hint=_HINT_BLOCK)
        if isinstance(g, Const) and g.value < 0:
            raise SizeError(f"extent {d} of the T.Kernel grid is {g.value}: expected at "
                            "least 0", loc=s.loc)


def _check_buffers(s: Launch) -> None:
    """Tile dimensions of at least 1; the block-local buffers of one block fit in memory
    (the JIT holds narrow floats as float32, so that is the size counted)."""
    total, limit = 0, memory_bytes()
    for a in walk(s.body):
        if not isinstance(a, Alloc) or a.buffer.data is not None:
            continue
        b = a.buffer
        dims = [int(e.value) for e in b.shape if isinstance(e, Const)]
        for d, n in enumerate(dims):
            if n <= 0:
                raise SizeError(f"{b.name} has shape {tuple(dims)}: every dimension of a "
                                f"block-local buffer must be at least 1; got {n} in "
                                f"dimension {d}", loc=a.loc, hint=_HINT_BLOCK)
        nbytes = math.prod(dims) * compute_dtype(b.dtype).itemsize
        total += nbytes
        if limit and total > limit:
            alone = "" if nbytes > limit else f", {_bytes(total)} with the buffers before it"
            raise SizeError(f"{b.name} ({b.scope} {b.dtype}, shape {tuple(dims)}) takes "
                            f"{_bytes(nbytes)}{alone}: more than this machine's memory, "
                            f"{_bytes(limit)}", loc=a.loc,
                            hint="block-local buffers hold one block's tiles: use smaller "
                                 "tiles and loop over the rest")


def _bytes(n: int) -> str:
    """`n bytes (x.y GiB)`."""
    unit = max((u for u in range(5) if n >= 1024 ** u), default=0)
    scaled = f" ({n / 1024 ** unit:.1f} {('B', 'KiB', 'MiB', 'GiB', 'TiB')[unit]})" if unit else ""
    return f"{n} bytes{scaled}"


@lru_cache(maxsize=1)
def memory_bytes() -> int:
    """This machine's physical memory in bytes (0 when the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


# ------------------------------------------------------------------ call time


def check_call(func: PrimFunc, sizes: dict[str, int], evaluate) -> None:
    """Raise SizeError for a block size (a divisor in a grid extent) below 1 or a grid
    extent below 0 at these sizes. `evaluate(expr, env)` gives an index expression's value
    (KeyError for a name it does not know: that check is skipped)."""
    todo = _call_checks(func)
    if not todo:
        return
    env = dict(sizes)
    for s in func.body:
        if isinstance(s, Let):  # grid extents may use names bound before the launch
            try:
                env[s.var.name] = evaluate(s.value, env)
            except (KeyError, TypeError, ValueError):
                pass
    for s, d, e, is_divisor in todo:
        try:
            v = evaluate(e, env)
        except (KeyError, TypeError, ValueError):
            continue
        if is_divisor and v <= 0:
            raise SizeError(f"{_grid_text(s, d)} divides by {format_expr(e)} = {v}"
                            f"{_values(e, env)}: expected a block size of at least 1",
                            loc=s.loc, hint="check the sizes it is computed from")
        if not is_divisor and v < 0:
            raise SizeError(f"{_grid_text(s, d)} is {v}{_values(e, env)}: expected at "
                            "least 0", loc=s.loc,
                            hint="a grid extent counts blocks; check the sizes it is "
                                 "computed from")


def _values(e: Expr, env: dict) -> str:
    if isinstance(e, Var):  # its value is already said
        return ""
    names = sorted({v.name for v in _vars(e) if v.name in env})
    return f" (with {', '.join(f'{n} = {env[n]}' for n in names)})" if names else ""


def _vars(e: Expr):
    if isinstance(e, Var):
        yield e
    elif isinstance(e, Call):
        for a in e.args:
            yield from _vars(a)


_PLANS: dict[int, tuple[PrimFunc, list]] = {}


def _call_checks(func: PrimFunc) -> list:
    """(launch, dim, expr, is_divisor) for each run-time divisor of a grid extent and each
    grid extent that may be negative; computed once per PrimFunc."""
    hit = _PLANS.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    sizes = {v.name for v in func.sizes}
    todo = []
    for s in func.body:
        if isinstance(s, Launch):
            for d, g in enumerate(s.grid):
                todo += [(s, d, div, True) for div in _divisors(g)
                         if not isinstance(div, Const)]
                if not _nonnegative(g, sizes):
                    todo.append((s, d, g, False))
    _PLANS[id(func)] = (func, todo)
    return todo


def _nonnegative(e: Expr, sizes: set[str]) -> bool:
    """Whether e is at least 0 for every value of the sizes (array dimensions, >= 0)."""
    if isinstance(e, Const):
        return e.value >= 0
    if isinstance(e, Var):
        return e.name in sizes
    if not isinstance(e, Call):
        return False
    if e.op in (Op.ADD, Op.MUL, Op.MIN, Op.MAX, Op.CAST):
        return all(_nonnegative(a, sizes) for a in e.args)
    if e.op is Op.FLOORDIV:
        div = e.args[1]
        return isinstance(div, Const) and div.value > 0 and _nonnegative(e.args[0], sizes)
    return False
