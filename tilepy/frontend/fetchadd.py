"""Fetch-and-adds of a thread phase as `FetchAdd` statements, for phases that run as one
vector step (frontend/phases.py). TileLang's `old = T.atomic_add(c[i], v, return_prev=True)`
reaches the phase as the pair `old = c[i]; c[i] = old + v` (one thread at a time); here the
pair becomes `T.fetch_add(old_t[t], c[i], v)`, the old value kept in a per-thread buffer.
Several fetch-and-adds on one counter buffer that head exclusive branches of one `if`
(each the first statement of its branch, through nested ifs) become one, placed before
that `if` under the branches' conditions, so that one statement takes every lane's turn.
"""

from __future__ import annotations

import dataclasses

from tilepy.frontend import exprs
from tilepy.frontend.walk import BODIES, map_expr, sub_exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Call, Const, Load, Region, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import Scope, int32


def rewrite(body: tuple, t: Var, own: set[str], new_buf) -> tuple:
    """`body` with its fetch-and-add pairs as FetchAdd statements; `new_buf(dtype)` gives a
    fresh per-thread buffer (thread dimension first) for an old value bound by a name."""
    fresh: set[str] = set()

    def made(dtype):
        b = new_buf(dtype)
        fresh.add(b.name)
        return b
    body = _pairs(body, t, own, made)
    return _merge(body, t, fresh)


# ---------------------------------------------------------------- pairs


def _pairs(body: tuple, t: Var, own: set[str], new_buf) -> tuple:
    out, i, subst = [], 0, {}
    body = list(body)
    while i < len(body):
        s = _subst(body[i], subst)
        nxt = _subst(body[i + 1], subst) if i + 1 < len(body) else None
        fa = _pair(s, nxt, t, own, new_buf)
        if fa is not None:
            if isinstance(s, S.Let):
                subst[s.var] = Load(fa.old.buffer, (t,))
            out.append(fa)
            i += 2
            continue
        fields = BODIES.get(type(s), ())
        if fields:
            s = dataclasses.replace(s, **{n: _pairs(getattr(s, n), t, own, new_buf)
                                          for n in fields})
        out.append(s)
        i += 1
    return tuple(out)


def _pair(s, nxt, t: Var, own: set[str], new_buf):
    """The FetchAdd for `old = c[i]; c[i] = old + v` (old a name, or this thread's element
    of a per-thread buffer), else None."""
    if not isinstance(nxt, S.Store):
        return None
    if isinstance(s, S.Let):
        load, old_ref = s.value, s.var
    elif isinstance(s, S.Store) and s.buffer.name in own and s.indices == (t,):
        load, old_ref = s.value, Load(s.buffer, (t,))
    else:
        return None
    c = nxt.buffer
    if not isinstance(load, Load) or load.buffer != c or load.indices != nxt.indices:
        return None
    if c.root.name in own or c.root.scope is Scope.GLOBAL or c.data is not None \
            or c.dtype.is_bool or not (c.dtype.is_int or c.dtype.is_float):
        return None
    v = _added(nxt.value, old_ref, c.dtype)
    if v is None or any(x == old_ref or isinstance(x, Load) and x.buffer.root == c.root
                        for x in sub_exprs(v)):
        return None
    one = tuple(Const(1, int32) for _ in nxt.indices)
    if isinstance(s, S.Let):
        ob = new_buf(c.dtype)
        old = Region(ob, (t,), (Const(1, int32),))
    else:
        old = Region(s.buffer, (t,), (Const(1, int32),))
    return S.FetchAdd(old, Region(c, nxt.indices, one), v, loc=nxt.loc)


def _added(e, old_ref, dt):
    """v when e is `old + v` (or `v + old`) computed and kept in dt, else None."""
    if isinstance(e, Call) and e.op is Op.CAST and e.dtype == dt and e.args[0].dtype == dt:
        e = e.args[0]
    if not isinstance(e, Call) or e.op is not Op.ADD or e.dtype != dt:
        return None
    a, b = e.args
    v = b if a == old_ref else a if b == old_ref else None
    return v if v is not None and v.dtype == dt else None


def _subst(s, m: dict):
    if not m:
        return s
    f = (lambda e: m.get(e, e) if isinstance(e, Var) else e)
    return _map_stmt(s, f)


def _map_stmt(s, f):
    changes = {}
    for fd in dataclasses.fields(s):
        v = getattr(s, fd.name)
        if fd.name in BODIES.get(type(s), ()):
            changes[fd.name] = tuple(_map_stmt(x, f) for x in v)
        else:
            changes[fd.name] = _map_value(v, f)
    return dataclasses.replace(s, **changes)


def _map_value(v, f):
    if exprs.is_ir(v):
        return map_expr(v, f)
    if isinstance(v, Region):
        return Region(v.buffer, tuple(map_expr(x, f) for x in v.starts),
                      tuple(map_expr(x, f) for x in v.extents))
    if isinstance(v, tuple):
        return tuple(_map_value(x, f) for x in v)
    return v


# ---------------------------------------------------------------- merging


def _merge(body: tuple, t: Var, fresh: set[str]) -> tuple:
    out = []
    for s in body:
        fields = BODIES.get(type(s), ())
        if fields:
            s = dataclasses.replace(s, **{n: _merge(getattr(s, n), t, fresh) for n in fields})
        if isinstance(s, S.If):
            pre, s = _merge_heads(s, t, fresh)
            out += pre
        out.append(s)
    return tuple(out)


def _heads(body: tuple, cond):
    """(FetchAdd, the condition under which it runs) for each fetch-and-add that is the
    first statement of `body`, or of a branch of an `if` that is (recursively)."""
    if not body:
        return []
    s = body[0]
    if isinstance(s, S.FetchAdd):
        return [(s, cond)]
    if isinstance(s, S.If):
        neg = exprs.call(Op.NOT, [s.cond], s.loc)
        return _heads(s.then_body, _and(cond, s.cond)) + _heads(s.else_body, _and(cond, neg))
    return []


def _and(a, b):
    return b if a is None else exprs.call(Op.AND, [a, b], b.loc)


def _merge_heads(s: S.If, t: Var, fresh: set[str]):
    """([the merged fetch-and-adds under their conditions], s without them). Only old
    values kept in fresh buffers (no other phase reads them) are merged."""
    heads = _heads((s,), None)
    by_buf: dict = {}
    for fa, cond in heads:
        by_buf.setdefault(fa.dst.buffer.name, []).append((fa, cond))
    groups = [g for g in by_buf.values() if len(g) > 1 and all(
        fa.dst.buffer == g[0][0].dst.buffer and fa.old.buffer.name in fresh for fa, _ in g)]
    if not groups:
        return [], s
    pre, drop, subst = [], set(), {}
    for g in groups:
        (fa0, c0), rest = g[0], g[1:]
        starts, value, cond = fa0.dst.starts, fa0.value, c0
        for fa, c in rest:
            starts = tuple(a if a == b else exprs.call(Op.SELECT, [c, b, a], fa.loc)
                           for a, b in zip(starts, fa.dst.starts))
            value = value if value == fa.value else exprs.call(
                Op.SELECT, [c, fa.value, value], fa.loc)
            cond = exprs.call(Op.OR, [cond, c], fa.loc)
            subst[Load(fa.old.buffer, (t,))] = Load(fa0.old.buffer, (t,))
        drop |= {id(fa) for fa, _ in g}
        merged = S.FetchAdd(fa0.old, Region(fa0.dst.buffer, starts, fa0.dst.extents), value,
                            loc=fa0.loc)
        pre.append(S.If(cond, (merged,), loc=fa0.loc))
    s = _drop(s, drop)
    f = (lambda e: subst.get(e, e) if isinstance(e, Load) else e)
    return pre, _map_stmt(s, f)


def _drop(s, ids: set):
    fields = BODIES.get(type(s), ())
    if not fields:
        return s
    return dataclasses.replace(s, **{n: tuple(_drop(x, ids) for x in getattr(s, n)
                                              if id(x) not in ids) for n in fields})
