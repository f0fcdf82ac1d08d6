"""Which per-thread variables hold the same value in every thread: those the kernel only
ever sets, outside thread-dependent branches and loops, to values that are themselves the
same for every thread (sizes, block indices, loop counters, shared or global memory read at
such indices). TileLang programs keep loop counts in such variables (`n = T.alloc_var`,
`n = s_count[0]`) and put barriers in those loops, which is legal CUDA; frontend/fission.py
may then keep such a loop outside its thread loops.
"""

from __future__ import annotations

from tilepy.frontend.simt import AllReduce, Shuffle, Vote
from tilepy.frontend.walk import BODIES, children
from tilepy.ir import stmt as S


def uniform_buffers(body: tuple, fx) -> set[str]:
    """The names of fx.per_thread's buffers that are uniform (a fixed point: start from
    all, drop any buffer written a thread-dependent value or under thread-dependent
    control, until nothing changes)."""
    base = set(fx.dep)
    fx.uniform = set(fx.per_thread)
    while True:
        fx.dep = set(base)
        before = set(fx.uniform)
        _visit(body, fx, False)
        if fx.uniform == before:
            break
    fx.dep = base
    return fx.uniform


def _visit(body, fx, divergent: bool) -> None:
    for s in body:
        if isinstance(s, S.Let) and fx.is_dep(s.value):
            fx.dep.add(s.var)
        elif isinstance(s, (Shuffle, Vote)):
            fx.uniform.discard(s.result.name)
        elif isinstance(s, AllReduce):
            fx.uniform.discard(s.dest.name)
        elif isinstance(s, S.Store) and s.buffer.name in fx.uniform:
            if divergent or fx.is_dep(s.value) or any(fx.is_dep(i) for i in s.indices):
                fx.uniform.discard(s.buffer.name)
        elif isinstance(s, S.TILE_OPS):
            for b in s.writes():
                if not (isinstance(s, S.Fill) and not divergent and not fx.is_dep(s.value)):
                    fx.uniform.discard(b.name)
        if children(s):
            inner = divergent or any(fx.is_dep(e) for e in fx.control(s))
            for name in BODIES[type(s)]:
                _visit(getattr(s, name), fx, inner)
