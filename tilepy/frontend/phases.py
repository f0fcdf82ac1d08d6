"""Which thread phases of a fissioned launch may run as `T.Parallel` loops: those whose
result cannot depend on the order of their threads, so running them together (the
interpreter's vector step) gives what thread 0, then 1, ... n-1 would. Each shared or
global buffer the phase writes must be written in one of these ways:

- **thread-private**: every access to it in the phase has the thread id itself at one
  index position (`s[t]`, `s[t, j]`), or, at one position, the same thread-independent
  base plus `c * t` plus terms of the phase's own loops that stay within [0, c) or step by
  multiples of `c * n` (`s[base + t * 8 + i]` for `i` in range(8); `s[i * 8 * n + t * 8 +
  v]`), or such an `e` flattened over two positions as `s[e // K, e % K]`, so threads
  touch disjoint elements (`_owner_form` gives the proof);
- **one store of the address's value**: one store statement, outside any loop of the phase,
  of a value that depends on the thread only through the address (`C[bn * 32 + t % 32] =
  s[t % 32]`, `flag[0] = 1`), to a buffer the phase does not read: threads that write one
  element write one value;
- **one element atomic add**, outside any loop of the phase, to a buffer the phase does not
  otherwise touch: `T.Parallel` adds in lane order, which is thread order;
- **one unguarded store at `... + t % m`** (a 2-D launch's `tx`), at the phase's top level,
  to a buffer the phase does not read: of the threads that write one element the last one's
  value stays, so the store is guarded to run only in the last m threads (`t >= n - m`);
- **one fetch-and-add** (`T.fetch_add`, frontend/fetchadd.py), outside any loop of the
  phase, to a counter buffer the phase does not otherwise touch: lanes take their turns in
  lane order;
- **stores at slots**: every store, outside the phase's loops, indexed at one position by
  `free terms +/- the old value of one fetch-and-add` (directly, through names, or through a
  per-thread variable set to it before), any value, and every read of the buffer in the
  phase apart from them (`s[r ^ 1, slot]` against `s[r, ...]`): threads write distinct
  elements as long as they took distinct slots, which the interpreter checks (`distinct`).
"""

from __future__ import annotations

import dataclasses

from tilepy.errors import NOLOC
from tilepy.frontend import exprs
from tilepy.frontend.walk import BODIES, children, deep, map_expr, stmt_exprs, sub_exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Call, Const, Load, Region, Var
from tilepy.ir.ops import Op


@dataclasses.dataclass
class _Uses:
    stores: list = dataclasses.field(default_factory=list)  # (Store, inside a loop)
    loads: list = dataclasses.field(default_factory=list)  # index tuples
    atomics: list = dataclasses.field(default_factory=list)  # (AtomicAdd, inside a loop)
    fetches: list = dataclasses.field(default_factory=list)  # (FetchAdd, inside a loop)
    slots: dict = dataclasses.field(default_factory=dict)  # id(store) -> its slot's FetchAdd
    viewed: bool = False  # accessed through a re-view (`.data`): not analysed


@dataclasses.dataclass
class _Walk:
    """What the collection walk knows: the thread id, per-thread buffers equal in every
    thread, the phase's lets, and which per-thread buffers hold a fetch-and-add's old value
    at this point of the walk (the FetchAdd)."""

    t: Var
    uniform: frozenset
    written: set | None = None  # the buffers the phase writes (a second walk knows them)
    lets: dict = dataclasses.field(default_factory=dict)
    slots: dict = dataclasses.field(default_factory=dict)


def parallel_body(body: tuple, t: Var, n: int, own: set[str], uniform=frozenset()):
    """Phase `body` (thread id `t` of `n`; `own`: its per-thread buffers, `uniform` those
    equal in every thread) as the body of a T.Parallel loop (last-thread guards added,
    fetch-and-adds whose old values are slots marked `distinct`), or None when it must stay
    serial."""
    uses: dict[str, _Uses] = {}
    dep: set = {t}  # t and the phase's names computed from it
    if not _collect(body, t, own, uses, dep, False, _Walk(t, frozenset(uniform))):
        return None
    written = {n for n, u in uses.items() if u.stores or u.atomics or u.fetches}
    w = _Walk(t, frozenset(uniform), written)  # again, now knowing what the phase writes
    uses, dep = {}, {t}
    _collect(body, t, own, uses, dep, False, w)
    loops = {s.var: int(s.stop.value) for s in deep(body) if isinstance(s, S.For)
             and s.start == Const(0, s.var.dtype) and s.step == Const(1, s.var.dtype)
             and isinstance(s.stop, Const)}
    # a strided index's base must not use t's names nor names bound in the phase (they
    # vary within a thread)
    varying = dep | {s.var for s in deep(body) if isinstance(s, (S.For, S.Let))}
    lets = _bound_once(body)
    guarded, distinct = {}, set()
    for name in written:
        if _buffer_ok(uses[name], t, dep, written, (n, loops, varying - set(loops), lets)):
            continue
        if _slot_stores(uses[name], dep, written, w, distinct):
            continue
        m = _last_writers(uses[name], body, t, n, dep, written)
        if m is None:
            return None
        guarded[id(uses[name].stores[0][0])] = m
    if distinct:
        body = _mark_distinct(body, distinct)
    if not guarded:
        return body
    c = (lambda op, *a: exprs.call(op, list(a), NOLOC))
    return tuple(S.If(c(Op.GE, t, n - guarded[id(s)]), (s,), loc=s.loc)
                 if id(s) in guarded else s for s in body)


def _bound_once(body) -> dict:
    """The phase's lets whose name is bound by one statement only: {Var: value}."""
    seen: dict = {}
    for s in deep(body):
        if isinstance(s, S.Let):
            seen[s.var] = None if s.var in seen else s.value
    return {v: e for v, e in seen.items() if e is not None}


def _mark_distinct(body, ids: set):
    out = []
    for s in body:
        if isinstance(s, S.FetchAdd) and id(s) in ids:
            s = dataclasses.replace(s, distinct=True)
        fields = BODIES.get(type(s), ())
        if fields:
            s = dataclasses.replace(s, **{f: _mark_distinct(getattr(s, f), ids)
                                          for f in fields})
        out.append(s)
    return tuple(out)


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


def _collect(body, t, own, uses, dep, in_loop: bool, w: _Walk) -> bool:
    w.slots = dict(w.slots)  # this body's view; restored by the caller
    for s in body:
        if isinstance(s, (S.Print, S.Breakpoint, S.Alloc)):
            return False
        if isinstance(s, S.For) and not _loop_ok(s, t, own):
            return False
        if isinstance(s, S.TILE_OPS) and not _element_atomic(s):
            return False
        if isinstance(s, S.Let):
            w.lets[s.var] = s.value
            if _mentions(s.value, dep):
                dep.add(s.var)
        for e in stmt_exprs(s):
            for x in sub_exprs(e):
                if isinstance(x, Load) and x.buffer.root.name not in own:
                    _use(uses, x.buffer).loads.append(x.indices)
        if isinstance(s, S.Store) and s.buffer.root.name not in own:
            u = _use(uses, s.buffer)
            u.stores.append((s, in_loop))
            u.slots[id(s)] = None if w.written is None else _slot_of(s.indices, dep, w)
        elif isinstance(s, S.AtomicAdd) and s.dst.buffer.root.name not in own:
            _use(uses, s.dst.buffer).atomics.append((s, in_loop))
        elif isinstance(s, S.FetchAdd):
            if s.dst.buffer.root.name in own or s.old.buffer.root.name not in own \
                    or s.old.buffer.name in w.uniform:
                return False
            _use(uses, s.dst.buffer).fetches.append((s, in_loop))
            w.slots[s.old.buffer.name] = s
        elif isinstance(s, S.Store):  # a per-thread buffer: maybe set to a slot
            w.slots.pop(s.buffer.name, None)
            fa = None if w.written is None or s.indices != (t,) else \
                _slot_of((s.value,), dep, w)
            if fa is not None:
                w.slots[s.buffer.name] = fa
        loop = in_loop or isinstance(s, (S.For, S.While))
        saved = w.slots
        for b in children(s):
            if not _collect(b, t, own, uses, dep, loop, w):
                return False
            w.slots = saved
        for name in _stored_inside(s):  # set in a branch or loop: no longer known here
            w.slots.pop(name, None)
        if isinstance(s, S.If) and len(s.then_body) == 1 and not s.else_body and \
                isinstance(s.then_body[0], S.FetchAdd):
            # merged fetch-and-adds (frontend/fetchadd.py): their old values are read
            # only in the branches whose conditions made up this one
            w.slots[s.then_body[0].old.buffer.name] = s.then_body[0]
    return True


def _loop_ok(s: S.For, t: Var, own: set) -> bool:
    """Bounds that name no thread id and read no memory; a T.Parallel loop only of element
    stores into the thread's own storage (`loc[v] *= x`): each thread's lanes then run
    beside the other threads' lanes, as they ran alone."""
    if any(x == t or isinstance(x, Load) for e in (s.start, s.stop, s.step)
           for x in sub_exprs(e)):
        return False
    return s.kind is not S.ForKind.PARALLEL or all(
        isinstance(x, (S.Store, S.Let, S.For)) and not (
            isinstance(x, S.Store) and x.buffer.root.name not in own) for x in deep(s.body))


def _stored_inside(s):
    return {x.buffer.name if isinstance(x, S.Store) else x.old.buffer.name
            for b in children(s) for x in deep(b) if isinstance(x, (S.Store, S.FetchAdd))}


def _slot_of(indices, dep, w: _Walk):
    """The FetchAdd whose old value (its slot) indexes one position of `indices` as
    `free terms +/- slot`, the other positions being thread-independent; else None."""
    found = None
    for i in indices:
        e = _expand(i, w.lets)
        if _free(e, dep, w.written, [], w):
            continue
        k = _key(e, dep, w.written, w)
        if found is not None or not isinstance(k, Load) or k.indices != (w.t,):
            return None
        found = w.slots.get(k.buffer.name)
        if found is None:
            return None
    return found


def _expand(e, lets: dict, depth: int = 8):
    """e with the phase's names replaced by their values."""
    for _ in range(depth):
        if not any(isinstance(x, Var) and x in lets for x in sub_exprs(e)):
            return e
        e = map_expr(e, lambda x: lets.get(x, x) if isinstance(x, Var) else x)
    return e


def _slot_stores(u: _Uses, dep, written, w: _Walk, distinct: set) -> bool:
    """Every store of the buffer at a slot of one fetch-and-add, outside loops, and every
    read of it apart from every store (see the module's docstring)."""
    if u.viewed or u.atomics or u.fetches or not u.stores:
        return False
    fas = {id(u.slots.get(id(s))) for s, _ in u.stores}
    if None in (u.slots.get(id(s)) for s, _ in u.stores) or len(fas) != 1:
        return False
    if any(in_loop for _, in_loop in u.stores):
        return False
    if not all(_apart(ld, s.indices, dep, written, w) for ld in u.loads
               for s, _ in u.stores):
        return False
    distinct.add(fas.pop())
    return True


def _apart(a, b, dep, written, w) -> bool:
    """Some index position where both are the same in every thread and differ: `x ^ c`
    against `x`, `x + c` against `x` (c a nonzero constant), or two different constants."""
    for x, y in zip(a, b):
        if not (_free(x, dep, written, [], w) and _free(y, dep, written, [], w)):
            continue
        if isinstance(x, Const) and isinstance(y, Const) and x.value != y.value:
            return True
        for p, q in ((x, y), (y, x)):
            if isinstance(p, Call) and p.op in (Op.BITXOR, Op.ADD, Op.SUB) \
                    and p.args[0] == q and isinstance(p.args[1], Const) \
                    and p.args[1].value != 0:
                return True
    return False


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
    if u.fetches:
        return not (u.loads or u.stores or u.atomics) and len(u.fetches) == 1 \
            and not u.fetches[0][1]
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


def _key(e, dep, written, w=None):
    """The one thread-dependent term of index e (None: e is thread-independent), or False
    when e is not `free terms +/- key`."""
    if _free(e, dep, written, [], w):
        return None
    while isinstance(e, Call) and e.op in (Op.ADD, Op.SUB):
        a, b = e.args
        if _free(a, dep, written, [], w):
            e = b
        elif _free(b, dep, written, [], w):
            e = a
        else:
            return False
    return e


def _free(e, dep, written, keys, w=None) -> bool:
    """e is the same in every thread: it names no thread-dependent name outside `keys` and
    reads no buffer that the phase writes (nor, with `w`, another thread's element of a
    per-thread buffer that is not equal in every thread)."""
    if any(e == k for k in keys):
        return True
    if isinstance(e, Var):
        return e not in dep
    if isinstance(e, Load):
        if w is not None and e.buffer.name in w.uniform and e.indices[:1] == (w.t,):
            return all(_free(i, dep, written, keys, w) for i in e.indices[1:])
        return e.buffer.root.name not in written and all(
            _free(i, dep, written, keys, w) for i in e.indices)
    if isinstance(e, Call):
        return all(_free(a, dep, written, keys, w) for a in e.args)
    return True


def _mentions(e, names: set) -> bool:
    return any(isinstance(x, Var) and x in names for x in sub_exprs(e))


def _strided(u: _Uses, t: Var, n: int, loops: dict, varying: set, lets: dict) -> bool:
    """Every access's address at one index position, or at a pair of positions holding `e //
    K` and `e % K` (K > 0 a constant, the same in every access: the pair gives back e = row
    * K + col, so distinct e are distinct elements), is an integer linear form that
    `_owner_form` accepts with one base and one c for all. The phase's lets are expanded."""
    accesses = [s.indices for s, _ in u.stores] + u.loads
    width = len(accesses[0])
    if any(len(a) != width for a in accesses):
        return False
    accesses = [tuple(_expand(i, lets) for i in a) for a in accesses]
    if any(_owner_form([a[p] for a in accesses], t, n, loops, varying) for p in range(width)):
        return True
    for p in range(width):
        for q in range(width):
            pairs = [_div_mod(a[p], a[q]) for a in accesses]
            if p != q and None not in pairs and len({k for _, k in pairs}) == 1 and \
                    _owner_form([e for e, _ in pairs], t, n, loops, varying):
                return True
    return False


def _div_mod(x, y):
    """(e, K) when x is `e // K` and y is `e % K` for one e and a constant K > 0."""
    if not (isinstance(x, Call) and x.op is Op.FLOORDIV and isinstance(y, Call)
            and y.op is Op.MOD and x.args == y.args):
        return None
    e, k = x.args
    ok = isinstance(k, Const) and type(k.value) is int and k.value > 0
    return (e, k.value) if ok else None


def _owner_form(indices: list, t: Var, n: int, loops: dict, varying: set) -> bool:
    """Each index is `base + c * t + lower + upper` with one base and one c > 0 for all: `i`
    loop variables of the phase (extents in `loops`) whose terms either stay within [0, c)
    together (lower) or have positive coefficients that are multiples of c * n (upper).
    Then index - base = c * n * U + c * t + L with U >= 0 and 0 <= L < c, so the thread is
    ((index - base) // c) % n: no element is touched by two threads. The thread and loop
    part stays below 2^31, so int32 wrap-around cannot make two addresses meet."""
    forms = [_linear(i) for i in indices]
    if not forms or any(f is None for f in forms):
        return False
    c, base = forms[0].get(t, 0), None
    if c <= 0:
        return False
    for f in forms:
        own = {k: v for k, v in f.items() if k in loops}
        rest = {k: v for k, v in f.items() if k not in loops and k is not t}
        upper = {k: v for k, v in own.items() if v > 0 and v % (c * n) == 0}
        lower = sum(v * (loops[k] - 1) for k, v in own.items() if k not in upper)
        top = sum(v * (loops[k] - 1) for k, v in upper.items()) + c * n
        if f.get(t, 0) != c or any(k in varying for k in rest) or top >= 2 ** 31 or \
                any(v < 0 for v in own.values()) or lower >= c:
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
