"""Rebuilding statements with new bodies: the one place passes learn which fields of a
statement hold bodies (ir/stmt.py's structured kinds)."""

from __future__ import annotations

import dataclasses

from tilepy.ir.expr import Call, Const, Load, Region, Var
from tilepy.ir.stmt import Alloc, For, If, Launch, Let, PrimFunc, Versioned, While, walk

_BODIES = {For: ("body",), While: ("body",), Launch: ("body",), If: ("then_body", "else_body"),
           Versioned: ("body", "fallback")}


def bodies(s) -> tuple[str, ...]:
    """The fields of s that hold bodies."""
    return _BODIES.get(type(s), ())


def with_bodies(s, f):
    """s with each of its bodies b replaced by f(b) (s itself when none changes)."""
    fields = bodies(s)
    if not fields:
        return s
    new = {n: tuple(f(getattr(s, n))) for n in fields}
    if all(_same(new[n], getattr(s, n)) for n in fields):
        return s
    return dataclasses.replace(s, **new)


def map_body(func: PrimFunc, f) -> PrimFunc:
    """func with its top-level body replaced by f(body)."""
    body = tuple(f(func.body))
    return func if _same(body, func.body) else dataclasses.replace(func, body=body)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def map_expr(e, f):
    """e with f applied to every sub-expression, operands first (loads' indices, calls'
    arguments); f returns its argument or a replacement."""
    if isinstance(e, Load):
        e = Load(e.buffer, tuple(map_expr(i, f) for i in e.indices))
    elif isinstance(e, Call):
        e = Call(e.op, tuple(map_expr(a, f) for a in e.args), e.dtype, e.loc)
    return f(e)


def map_exprs(s, f):
    """Statement s with f applied (map_expr) to every expression in it and in its bodies:
    values, indices, conditions, loop bounds, region bounds."""
    changes = {}
    for fd in dataclasses.fields(s):
        v = getattr(s, fd.name)
        if fd.name in bodies(s):
            new = tuple(map_exprs(t, f) for t in v)
        else:
            new = _value(v, f)
        if new is not v:
            changes[fd.name] = new
    return dataclasses.replace(s, **changes) if changes else s


def _value(v, f):
    if isinstance(v, (Load, Call, Var, Const)):
        new = map_expr(v, f)
        return v if new == v else new
    if isinstance(v, Region):
        new = Region(v.buffer, tuple(map_expr(x, f) for x in v.starts),
                     tuple(map_expr(x, f) for x in v.extents))
        return v if new == v else new
    if isinstance(v, tuple):
        new = tuple(_value(x, f) for x in v)
        return v if _same(new, v) else new
    return v


class Fresh:
    """New names for a pass's variables and buffers: `prefix` + kind + a count, skipping
    every name the function already binds, so the same kernel gets the same names (and
    the same disk-cache entry) in every process."""

    def __init__(self, func_or_body, prefix: str):
        self.prefix, self.count, self.made = prefix, 0, set()
        body = func_or_body.body if isinstance(func_or_body, PrimFunc) else func_or_body
        self.taken = _bound_names(body)
        if isinstance(func_or_body, PrimFunc):
            self.taken |= {v.name for v in func_or_body.sizes}
            self.taken |= {p.name for p in func_or_body.params}

    def __call__(self, kind: str) -> str:
        while True:
            name = f"{self.prefix}{kind}{self.count}"
            self.count += 1
            if name not in self.taken:
                self.taken.add(name)
                self.made.add(name)
                return name


def _bound_names(body) -> set[str]:
    out = set()
    for s in walk(body):
        if isinstance(s, (For, Let)):
            out.add(s.var.name)
        elif isinstance(s, Alloc):
            out.add(s.buffer.name)
        elif isinstance(s, Launch):
            out.update(v.name for v in s.block_vars)
    return out


def unversioned(s):
    """s with every Versioned statement in it replaced by its fallback: the statements as
    the kernel wrote them (for analyses of the program as written, e.g. jit/kloop.py)."""
    def body(b):
        out = []
        for t in b:
            if isinstance(t, Versioned):
                out.extend(body(t.fallback))
            else:
                out.append(with_bodies(t, body))
        return tuple(out)

    return with_bodies(s, body)
