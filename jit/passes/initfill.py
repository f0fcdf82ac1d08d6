"""The initfill pass: which block-local arrays need their zero fill (those a read may reach
before a write); the others' allocations get `zero_fill=False`.

The JIT allocates block-local arrays with `np.zeros`, so a read of an element never written
gives 0 on every run (the interpreter raises instead). Most arrays are written whole before
any read, and clearing them costs a memset per block. Decides nothing about values.
"""

from __future__ import annotations

import dataclasses

from tilepy.ir.expr import Buffer, Const, Region, Var, loads
from tilepy.ir.stmt import Alloc, Breakpoint, For, If, PrimFunc, Store, Versioned, branches, walk
from tilepy.ir.tileops import reads, written_regions
from tilepy.jit.passes.rewrite import map_body, with_bodies

_WRITE, _READ = "write", "read"


def reviewed(body) -> set[str]:
    """Names of buffers whose storage a `T.Tensor(..., buf.data)` re-view shares."""
    out = set()
    for s in walk(body):
        if isinstance(s, Alloc):
            b = s.buffer.data
            while b is not None:  # every buffer up the chain shares the storage
                out.add(b.name)
                b = b.data
    return out


def needs_zeros(rest, buf: Buffer) -> bool:
    """True unless every path through `rest` (the statements after buf's Alloc) writes all
    of `buf` before reading any of it; only then does it get `np.empty`. Proven from the
    first statement touching it, in program order, through `if` branches and loops:
    - a whole-buffer write: `T.copy` into the whole buffer (edge tiles of a global source
      read as 0, so every element is written), `T.fill`/`T.clear`,
      `T.gemm(clear_accum=True)`, a clearing `T.reduce_*`, `T.cumsum`, each with no
      operand reading the buffer itself;
    - a loop nest over exactly the buffer's shape (each loop from 0, step 1) whose only
      statement touching the buffer is an unconditional `buf[i, j, ...] = value` with the
      nest's variables in order, and whose value does not read the buffer;
    - an `if` whose branches each write it first or leave it alone, and a loop whose body
      writes it first; where a path may leave it alone (a branch, zero trips), what
      follows must not read it first either.
    Anything else (a read, a partial write, a `while`) keeps the zeros, as does a re-view
    of its storage anywhere in the kernel (`reviewed`, which the caller asks first)."""
    return _first(tuple(rest), buf.name) == _READ


# ------------------------------------------------------------------ touches


def _expr_reads(e, name: str) -> bool:
    return any(ld.buffer.name == name for ld in loads(e))


def touches(s, name: str) -> bool:
    """Whether statement s (and what it contains) reads or writes buffer `name`."""
    for t in walk((s,)):
        if isinstance(t, Breakpoint):  # the debugger shows every buffer
            return True
        if any(b.name == name for b in t.reads() + t.writes()):
            return True
    return False


# ------------------------------------------------------------------ whole writes


def _const(e, value: int) -> bool:
    return isinstance(e, Const) and int(e.value) == value


def whole(r: Region, name: str) -> bool:
    """r is all of buffer `name`: starts 0, extents its static shape."""
    b = r.buffer
    return (b.name == name and all(_const(s, 0) for s in r.starts)
            and all(isinstance(x, Const) and isinstance(n, Const) and int(x.value) == int(n.value)
                    for x, n in zip(r.extents, b.shape)))


def _whole_write(s, name: str) -> bool:
    if isinstance(s, For):
        return _nest_writes_all(s, name)
    # a tile op writing all of it and reading none of it (a gemm without clear_accum, a
    # reduce without clear and an atomic add read their destination)
    return (any(whole(r, name) for r in written_regions(s))
            and not any(b.name == name for b in reads(s)))


def _nest_writes_all(loop: For, name: str) -> bool:
    """A nest `for v0 in [0, n0): ... for vk in [0, nk): ... buf[v0, ..., vk] = value`
    over buf's whole shape, the store being the only statement that touches buf."""
    loops, body = [loop], loop.body
    while True:
        inner = [s for s in body if touches(s, name)]
        if len(inner) != 1:
            return False
        s = inner[0]
        if isinstance(s, For):
            loops.append(s)
            body = s.body
            continue
        break
    if not isinstance(s, Store) or s.buffer.name != name or len(loops) != s.buffer.ndim:
        return False
    if _expr_reads(s.value, name) or any(_expr_reads(i, name) for i in s.indices):
        return False
    for lp, idx, n in zip(loops, s.indices, s.buffer.shape):
        if not (isinstance(idx, Var) and idx.name == lp.var.name and _const(lp.start, 0)
                and _const(lp.step, 1) and isinstance(n, Const) and isinstance(lp.stop, Const)
                and int(lp.stop.value) == int(n.value)):
            return False
    return True


# ------------------------------------------------------------------ first touch


def _first(body: tuple, name: str) -> str | None:
    """_WRITE if every path writes all of the buffer before reading it, _READ if some
    path may read it first (or the proof fails), None if nothing touches it."""
    for k, s in enumerate(body):
        if not touches(s, name):
            continue
        if _whole_write(s, name):
            return _WRITE
        if isinstance(s, (If, Versioned)):
            t, e = (_first(b, name) for b in branches(s))
            if _READ in (t, e):
                return _READ
            if t == e == _WRITE:
                return _WRITE
            return _READ if _first(body[k + 1:], name) == _READ else _WRITE
        if isinstance(s, For) and not any(_expr_reads(x, name)
                                          for x in (s.start, s.stop, s.step)):
            if _first(s.body, name) != _WRITE:
                return _READ
            # every iteration writes it first; zero iterations leave it untouched
            return _READ if _first(body[k + 1:], name) == _READ else _WRITE
        return _READ
    return None


# ------------------------------------------------------------------ the pass


def run(func: PrimFunc) -> PrimFunc:
    """Marks `zero_fill=False` on each block-local allocation that `needs_zeros` clears."""
    views = reviewed(func.body)
    return map_body(func, lambda body: _body(body, views))


def _body(body: tuple, views: set) -> tuple:
    out = []
    for k, s in enumerate(body):
        s = with_bodies(s, lambda b: _body(b, views))
        if (isinstance(s, Alloc) and s.zero_fill and s.buffer.data is None
                and s.buffer.name not in views and not needs_zeros(body[k + 1:], s.buffer)):
            s = dataclasses.replace(s, zero_fill=False)
        out.append(s)
    return tuple(out)
