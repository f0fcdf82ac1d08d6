"""Which thread phases of a fissioned launch may run as `T.Parallel` loops: those whose
result cannot depend on the order of their threads, so running them together (the
interpreter's vector step) gives what thread 0, then 1, ... n-1 would. Each shared or
global buffer the phase writes must be written in one of these ways:

- **thread-private**: every access to it in the phase has the thread id itself at one
  index position (`s[t]`, `s[t, j]`), or, at one position, the same thread-independent
  base plus `c * t` plus terms of the phase's own loops that stay within [0, c) (`s[base +
  t * 8 + i]` for `i` in range(8)), so threads touch disjoint elements;
- **one store of the address's value**: one store statement, outside any loop of the phase,
  of a value that depends on the thread only through the address (`C[bn * 32 + t % 32] =
  s[t % 32]`, `flag[0] = 1`), to a buffer the phase does not read: threads that write one
  element write one value;
- **one element atomic add**, outside any loop of the phase, to a buffer the phase does not
  otherwise touch: `T.Parallel` adds in lane order, which is thread order;
- **one unguarded store at `... + t % m`** (a 2-D launch's `tx`), at the phase's top level,
  to a buffer the phase does not read: of the threads that write one element the last one's
  value stays, so the store is guarded to run only in the last m threads (`t >= n - m`).
"""

from __future__ import annotations

import dataclasses

from tilepy.errors import NOLOC
from tilepy.frontend import exprs
from tilepy.frontend.walk import children, deep, stmt_exprs, sub_exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Call, Const, Load, Region, Var
from tilepy.ir.ops import Op


@dataclasses.dataclass
class _Uses:
    stores: list = dataclasses.field(default_factory=list)  # (Store, inside a loop)
    loads: list = dataclasses.field(default_factory=list)  # index tuples
    atomics: list = dataclasses.field(default_factory=list)  # (AtomicAdd, inside a loop)
    viewed: bool = False  # accessed through a re-view (`.data`): not analysed


def parallel_body(body: tuple, t: Var, n: int, own: set[str]):
    """Phase `body` (thread id `t` of `n`; `own`: its per-thread buffers) as the body of a
    T.Parallel loop (last-thread guards added), or None when it must stay serial."""
    uses: dict[str, _Uses] = {}
    dep: set = {t}  # t and the phase's names computed from it
    if not _collect(body, t, own, uses, dep, False):
        return None
    written = {n for n, u in uses.items() if u.stores or u.atomics}
    loops = {s.var: int(s.stop.value) for s in deep(body) if isinstance(s, S.For)
             and s.start == Const(0, s.var.dtype) and s.step == Const(1, s.var.dtype)
             and isinstance(s.stop, Const)}
    # a strided index's base must not use t's names nor names bound in the phase (they
    # vary within a thread)
    varying = dep | {s.var for s in deep(body) if isinstance(s, (S.For, S.Let))}
    guarded = {}
    for name in written:
        if _buffer_ok(uses[name], t, dep, written, (loops, varying - set(loops))):
            continue
        m = _last_writers(uses[name], body, t, n, dep, written)
        if m is None:
            return None
        guarded[id(uses[name].stores[0][0])] = m
    if not guarded:
        return body
    c = (lambda op, *a: exprs.call(op, list(a), NOLOC))
    return tuple(S.If(c(Op.GE, t, n - guarded[id(s)]), (s,), loc=s.loc)
                 if id(s) in guarded else s for s in body)


def _last_writers(u: _Uses, body, t, n, dep, written):
    """m when u's one store sits at the phase's top level, indexed by free terms and one
    `t % m` (m <= n), into a buffer the phase does not read; else None."""
    if u.viewed or u.loads or u.atomics or len(u.stores) != 1:
        return None
    s = u.stores[0][0]
    if not any(s is x for x in body):
        return None
    keys = [_key(i, dep, written) for i in s.indices]
    keys = [k for k in keys if k is not None]
    if len(keys) != 1 or not isinstance(keys[0], Call) or keys[0].op is not Op.MOD:
        return None
    a, m = keys[0].args
    if a != t or not isinstance(m, Const) or not 0 < int(m.value) <= n:
        return None
    return int(m.value)


def _collect(body, t, own, uses, dep, in_loop: bool) -> bool:
    for s in body:
        if isinstance(s, (S.Print, S.Breakpoint, S.Alloc)):
            return False
        if isinstance(s, S.For) and (s.kind is S.ForKind.PARALLEL or any(
                x == t or isinstance(x, Load) for e in (s.start, s.stop, s.step)
                for x in sub_exprs(e))):
            return False
        if isinstance(s, S.TILE_OPS) and not _element_atomic(s):
            return False
        if isinstance(s, S.Let) and _mentions(s.value, dep):
            dep.add(s.var)
        for e in stmt_exprs(s):
            for x in sub_exprs(e):
                if isinstance(x, Load) and x.buffer.root.name not in own:
                    _use(uses, x.buffer).loads.append(x.indices)
        if isinstance(s, S.Store) and s.buffer.root.name not in own:
            _use(uses, s.buffer).stores.append((s, in_loop))
        elif isinstance(s, S.AtomicAdd) and s.dst.buffer.root.name not in own:
            _use(uses, s.dst.buffer).atomics.append((s, in_loop))
        loop = in_loop or isinstance(s, (S.For, S.While))
        if not all(_collect(b, t, own, uses, dep, loop) for b in children(s)):
            return False
    return True


def _use(uses: dict, buf) -> _Uses:
    u = uses.setdefault(buf.root.name, _Uses())
    u.viewed |= buf.data is not None
    return u


def _element_atomic(s) -> bool:
    return isinstance(s, S.AtomicAdd) and not isinstance(s.value, Region) and all(
        isinstance(e, Const) and e.value == 1 for e in s.dst.extents)


def _buffer_ok(u: _Uses, t: Var, dep: set, written: set, strides: tuple) -> bool:
    if u.viewed:
        return False
    if not u.atomics and (_private(u, t) or _strided(u, t, *strides)):
        return True
    if u.loads or len(u.stores) + len(u.atomics) != 1:
        return False
    s, in_loop = (u.stores or u.atomics)[0]
    if in_loop:
        return False
    if u.atomics:
        return True
    return _value_of_address(s, dep, written)


def _private(u: _Uses, t: Var) -> bool:
    """Some index position holds `t` itself in every access."""
    accesses = [s.indices for s, _ in u.stores] + u.loads
    n = len(accesses[0])
    return any(all(len(a) == n and a[p] == t for a in accesses) for p in range(n))


def _value_of_address(s: S.Store, dep: set, written: set) -> bool:
    """Whether the stored value depends on the thread only through the store's address:
    each index is thread-independent terms added to (or subtracted from) one
    thread-dependent key; the value with its keys set aside must be thread-independent
    and read no buffer the phase writes."""
    keys = [_key(i, dep, written) for i in s.indices]
    if any(k is False for k in keys):
        return False
    keys = [k for k in keys if k is not None]
    return _free(s.value, dep, written, keys)


def _key(e, dep, written):
    """The one thread-dependent term of index e (None: e is thread-independent), or False
    when e is not `free terms +/- key`."""
    if _free(e, dep, written, []):
        return None
    while isinstance(e, Call) and e.op in (Op.ADD, Op.SUB):
        a, b = e.args
        if _free(a, dep, written, []):
            e = b
        elif _free(b, dep, written, []):
            e = a
        else:
            return False
    return e


def _free(e, dep, written, keys) -> bool:
    """e is the same in every thread: it names no thread-dependent name outside `keys` and
    reads no buffer that the phase writes."""
    if any(e == k for k in keys):
        return True
    if isinstance(e, Var):
        return e not in dep
    if isinstance(e, Load):
        return e.buffer.root.name not in written and all(
            _free(i, dep, written, keys) for i in e.indices)
    if isinstance(e, Call):
        return all(_free(a, dep, written, keys) for a in e.args)
    return True


def _mentions(e, names: set) -> bool:
    return any(isinstance(x, Var) and x in names for x in sub_exprs(e))


def _strided(u: _Uses, t: Var, loops: dict, varying: set) -> bool:
    """Some index position is `base + c * t + sum(k * i)` in every access: one base and one
    c > 0 for all, `i` loop variables of the phase (extents in `loops`) whose terms stay in
    [0, c). Element `e` there is touched only by thread (e - base) // c."""
    accesses = [s.indices for s, _ in u.stores] + u.loads
    n = len(accesses[0])
    return any(_strided_at([a[p] for a in accesses if len(a) == n], len(accesses), t, loops,
                           varying) for p in range(n))


def _strided_at(indices: list, count: int, t: Var, loops: dict, varying: set) -> bool:
    forms = [_linear(i) for i in indices]
    if len(forms) != count or any(f is None for f in forms):
        return False
    c, base = forms[0].get(t, 0), None
    for f in forms:
        own = {k: v for k, v in f.items() if k in loops}
        rest = {k: v for k, v in f.items() if k not in loops and k is not t}
        if f.get(t, 0) != c or c <= 0 or any(k in varying for k in rest) or \
                any(v < 0 for v in own.values()) or \
                sum(v * (loops[k] - 1) for k, v in own.items()) >= c:
            return False
        if base is not None and rest != base:
            return False
        base = rest
    return True


def _linear(e):
    """e as {Var: coefficient, None: constant} when it is an integer linear form, else None."""
    if isinstance(e, Const) and type(e.value) is int:
        return {None: e.value}
    if isinstance(e, Var):
        return {e: 1}
    if not isinstance(e, Call) or e.op not in (Op.ADD, Op.SUB, Op.MUL):
        return None
    a, b = (_linear(x) for x in e.args)
    if a is None or b is None:
        return None
    if e.op is Op.MUL:
        if set(a) == {None}:
            a, b = b, a
        return {k: v * b[None] for k, v in a.items() if v * b[None]} if set(b) == {None} \
            else None
    sign, out = (1 if e.op is Op.ADD else -1), dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v}
