"""Walking the statements and expressions of a thread-level launch body, for
frontend/fission.py and frontend/syncplan.py (which also see the front end's markers)."""

from __future__ import annotations

import dataclasses

from tilepy.frontend import exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Call, Load, Region

BODIES = {S.For: ("body",), S.While: ("body",), S.If: ("then_body", "else_body")}


def map_expr(e, f):
    """e with f applied bottom-up to every sub-expression."""
    if isinstance(e, Load):
        e = Load(e.buffer, tuple(map_expr(i, f) for i in e.indices))
    elif isinstance(e, Call):
        e = Call(e.op, tuple(map_expr(a, f) for a in e.args), e.dtype, e.loc)
    return f(e)


def sub_exprs(e):
    """Every sub-expression of e (e included)."""
    yield e
    if isinstance(e, Load):
        for i in e.indices:
            yield from sub_exprs(i)
    elif isinstance(e, Call):
        for a in e.args:
            yield from sub_exprs(a)


def stmt_exprs(s):
    """The expressions a statement holds itself (not its bodies')."""
    for fd in dataclasses.fields(s):
        if fd.name in BODIES.get(type(s), ()):
            continue
        yield from _field_exprs(getattr(s, fd.name))


def _field_exprs(v):
    if exprs.is_ir(v):
        yield v
    elif isinstance(v, Region):
        yield from v.starts
        yield from v.extents
    elif isinstance(v, tuple):
        for x in v:
            yield from _field_exprs(x)


def children(s) -> tuple:
    """The bodies of a structured statement (none for others)."""
    return tuple(getattr(s, n) for n in BODIES.get(type(s), ()))


def deep(body):
    """Every statement in body, nested ones included."""
    for s in body:
        yield s
        for b in children(s):
            yield from deep(b)
