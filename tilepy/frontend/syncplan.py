"""TileLang's implicit barriers. Where the threads of a block write shared memory that other
threads then read or overwrite, TileLang's compiler inserts a barrier itself (its
thread-storage-sync pass), and programs rely on it. This pass inserts the same barriers, as
markers for frontend/fission.py, at statement boundaries that every thread runs alike: before
a statement whose shared accesses conflict with those since the last barrier, and at the
start of a loop body whose iterations conflict with each other.
"""

from __future__ import annotations

import dataclasses

from tilepy.frontend.simt import MARKERS, Barrier
from tilepy.frontend.walk import BODIES, children, deep, stmt_exprs, sub_exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Load
from tilepy.ir.types import Scope

ANY = ("any",)  # a tile op's region: any element
IMPLICIT = "an implicit barrier (TileLang inserts one where shared memory is shared)"


class Accesses:
    """Shared buffers read and written since the last barrier: name -> index tuples."""

    def __init__(self):
        self.reads: dict[str, set] = {}
        self.writes: dict[str, set] = {}

    def add(self, kind: dict, buf, idx) -> None:
        if buf.root.scope is Scope.SHARED:
            kind.setdefault(buf.root.name, set()).add(idx if buf.data is None else ANY)

    def merge(self, other: "Accesses") -> None:
        for mine, theirs in ((self.reads, other.reads), (self.writes, other.writes)):
            for k, v in theirs.items():
                mine.setdefault(k, set()).update(v)

    def conflicts(self, later: "Accesses", fx) -> bool:
        """Whether `later` touches, from another thread, what self wrote, or writes what
        self read. Accesses at one index tuple naming the thread (`sh[tx]`) are one
        thread's own, as TileLang's pass takes them."""
        for name in set(self.reads) | set(self.writes) | set(later.reads) | set(later.writes):
            hit = (name in later.writes and (name in self.reads or name in self.writes)) or (
                name in later.reads and name in self.writes)
            if not hit:
                continue
            idx = set()
            for d in (self.reads, self.writes, later.reads, later.writes):
                idx |= d.get(name, set())
            if len(idx) == 1 and ANY not in idx and any(fx.is_dep(e) for e in next(iter(idx))):
                continue
            return True
        return False


def accesses(body, fx) -> Accesses:
    acc = Accesses()
    for s in deep(body):
        if isinstance(s, MARKERS):
            continue
        for e in stmt_exprs(s):
            for x in sub_exprs(e):
                if isinstance(x, Load):
                    acc.add(acc.reads, x.buffer, x.indices)
        if isinstance(s, S.Store):
            acc.add(acc.writes, s.buffer, s.indices)
        elif isinstance(s, S.TILE_OPS):
            for b in s.reads():
                acc.add(acc.reads, b, ANY)
            for b in s.writes():
                acc.add(acc.writes, b, ANY)
    return acc


def plan(body: tuple, fx) -> tuple:
    """body with implicit barriers inserted; `fx` (the Fission) classifies."""
    out: list = []
    state = Accesses()
    for s in body:
        if isinstance(s, S.Let) and fx.is_dep(s.value):
            fx.dep.add(s.var)
        if isinstance(s, MARKERS) or fx.is_block_op(s):
            out.append(s)
            state = Accesses()
            continue
        if children(s) and not any(fx.is_dep(e) for e in fx.control(s)):
            s = dataclasses.replace(s, **{n: plan(getattr(s, n), fx)
                                          for n in BODIES[type(s)]})
            loop = isinstance(s, S.While) or (isinstance(s, S.For)
                                              and s.kind is not S.ForKind.PARALLEL)
            if loop and not fx.has_split(s):
                own = accesses(s.body, fx)
                if own.conflicts(own, fx):
                    s = dataclasses.replace(s, body=(Barrier(s.loc, IMPLICIT),) + s.body)
            if fx.has_split(s):  # fission runs it between phases of its own
                out.append(s)
                state = Accesses()
                continue
        acc = accesses((s,), fx)
        atomic = id(s) in getattr(fx.tr, "atomic_stores", ())  # the store of a read-add
        if state.conflicts(acc, fx) and not atomic:
            out.append(Barrier(s.loc, IMPLICIT))
            state = acc
        else:
            state.merge(acc)
        out.append(s)
    return tuple(out)
