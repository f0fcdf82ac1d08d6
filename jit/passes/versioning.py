"""The versioning pass: an outermost T.Parallel nest of a launch whose global element indices
can be bounded before it runs becomes `Versioned(cond, body=nest, fallback=nest)` with those
accesses as its `inbounds`: `cond` says every bounded index range lies inside its array, so
the JIT runs that copy's accesses unchecked (a check keeps LLVM from vectorising the loop
around it). The ranges are int64 `Let`s just before the nest. Decides no values.
"""

from __future__ import annotations

import dataclasses

from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, loads
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, ForKind, If, Launch, Let, PrimFunc, Store, Versioned, While, walk
from tilepy.ir.tileops import entry
from tilepy.ir.types import Scope, bool_, int64
from tilepy.jit.passes.guards import FLIP, as_int64
from tilepy.jit.passes.rewrite import Fresh, map_body, with_bodies

_I32 = (-(2**31), 2**31 - 1)
_ARITH = (Op.ADD, Op.SUB, Op.NEG, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX)
_BY_CONST = (Op.MUL, Op.FLOORDIV, Op.MOD)
_FOLD = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
         Op.FLOORDIV: lambda a, b: a // b, Op.MIN: min, Op.MAX: max}


def run(func: PrimFunc) -> PrimFunc:
    """The versioning pass over every launch (nests inside a Versioned body are already
    proven by the pass that made it; its fallback is versioned like any body)."""
    fresh = Fresh(func, "rng_")
    return map_body(func, lambda body: tuple(
        with_bodies(s, lambda b: _body(b, fresh)) if isinstance(s, Launch) else s
        for s in body))


def _body(body, fresh: Fresh) -> list:
    out: list = []
    for s in body:
        made = _version(s, fresh) if isinstance(s, For) and s.kind is ForKind.PARALLEL else None
        if made is not None:
            out.extend(made)
        elif isinstance(s, Versioned):
            out.append(dataclasses.replace(s, fallback=tuple(_body(s.fallback, fresh))))
        else:
            out.append(with_bodies(s, lambda b: _body(b, fresh)))
    return out


def _version(loop: For, fresh: Fresh) -> list | None:
    """[Let ..., Versioned] for the nest, or None when no global access can be bounded.

    Ranges come from interval arithmetic in int64, evaluated just before the nest: loop
    variables of the nest range over [start, stop - 1] (their bounds bounded the same way),
    names it binds with `x = ...` take their value's range, and anything else without a
    load is a fixed value computed there. Supported: +, -, unary -, * and floor division
    and modulo by constants, min/max, casts between integer types. A comparison of a
    variable in an enclosing `if` of the nest (`if ih >= 0 and ih < H:`) narrows that
    variable's range for the accesses under it: variables are immutable, so it holds
    wherever they run. Comparisons on both sides bound a variable whose value has no range
    (one read from an array: a gather's index table). Each intermediate range must also
    lie inside its node's dtype and the int32 range, so no index arithmetic in the nest
    can wrap; otherwise, or for any
    other expression (a load, a non-constant product), that access stays checked in both
    copies. The ranges over-approximate: the test may send a nest to the checked copy
    needlessly, but never skips a needed check."""
    accesses = _accesses(loop)
    # a dry run finds the accesses bounded at every occurrence; the real run bounds those
    # only, so an access that cannot be bounded adds no condition
    proven = {(b, i) for b, i, _ in accesses}
    proven -= {(b, i) for b, i, _ in _bound(loop, accesses, lambda kind: "dry")[2]}
    if not proven:
        return None
    lets, conds, failed = _bound(loop, [a for a in accesses if a[:2] in proven], fresh)
    assert not failed, "the dry run bounded these accesses"
    if any(isinstance(c, Const) and not c.value for c in conds):
        return None  # an array too small for any of the nest's indices: always checked
    cond = None
    for c in conds:
        if not isinstance(c, Const):
            cond = c if cond is None else Call(Op.AND, (cond, c), bool_)
    inbounds = tuple(dict.fromkeys(Load(b, i) for b, i, _ in accesses if (b, i) in proven))
    return [*lets, Versioned(Const(True, bool_) if cond is None else cond, (), (loop,),
                             (loop,), "versioning", inbounds, loc=loop.loc)]


def _accesses(loop: For) -> list[tuple]:
    """(buffer, indices, guards) of every global element load and store in the nest, in
    program order: `guards` are the conditions of the enclosing `if`s (then-branches)
    inside the nest, which hold wherever the access runs."""
    out: list[tuple] = []

    def visit(stmts, guards):
        for s in stmts:
            for f in entry(s).reads:
                for x in _items(getattr(s, f)):
                    if isinstance(x, Buffer):  # T.print's whole buffers
                        continue
                    exprs = [*x.starts, *x.extents] if isinstance(x, Region) else [x]
                    out.extend((ld.buffer, ld.indices, guards)
                               for e in exprs for ld in loads(e) if ld.indices)
            if isinstance(s, Store) and s.indices:
                out.append((s.buffer, s.indices, guards))
            if isinstance(s, If):
                visit(s.then_body, guards + (s.cond,))
                visit(s.else_body, guards)
            elif isinstance(s, (For, While)):
                visit(s.body, guards)

    visit([loop], ())
    return [acc for acc in out if acc[0].scope is Scope.GLOBAL]


def _items(x) -> tuple:
    return x if isinstance(x, tuple) else () if x is None else (x,)


def _bound(loop: For, accesses: list, fresh) -> tuple[list, list, list]:
    """(the Lets computing the ranges, the test's conditions, the accesses that could not
    be bounded) for `accesses`."""
    binds, lets, conds, contexts, failed = _binds(loop), [], {}, {}, []
    for acc in accesses:
        buf, idx, guards = acc
        if guards not in contexts:
            contexts[guards] = _Bounds(binds, lets, conds, fresh, guards)
        ranges = [contexts[guards].interval(i) for i in idx]
        if any(r is None or isinstance(r[0], int) and r[0] < 0 for r in ranges):
            failed.append(acc)
            continue
        for d, (lo, hi) in enumerate(ranges):
            if not isinstance(lo, int):
                conds[_cmp(Op.LE, 0, lo)] = None
            conds[_cmp(Op.LT, hi, as_int64(buf.shape[d]))] = None
    return lets, list(conds), failed


def _const(x):
    return Const(x, int64) if isinstance(x, int) else x


def _cmp(op: Op, a, b):
    """`a op b` in int64; a Const when both sides are known."""
    a, b = _const(a), _const(b)
    if isinstance(a, Const) and isinstance(b, Const):
        known = {Op.LE: a.value <= b.value, Op.LT: a.value < b.value}[op]
        return Const(bool(known), bool_)
    return Call(op, (a, b), bool_)


def _binds(loop: For) -> dict:
    """Per name bound in the nest, the For or Let binding it (None: bound twice)."""
    binds: dict = {}
    for s in [loop, *walk(loop.body)]:
        if isinstance(s, (For, Let)):
            binds[s.var.name] = None if s.var.name in binds else s
    return binds


@dataclasses.dataclass
class _Bounds:
    """Interval bounds of the index expressions of one nest, under one set of guards. A
    bound is an int (known now) or an int64 expression: a Var of one of `lets`, or a
    value fixed during the nest."""

    binds: dict  # name -> the For or Let binding it in the nest (None: bound twice)
    lets: list  # the Lets computing bounds, shared by all contexts of the nest
    conds: dict  # the nest's test: an ordered set of conditions, shared likewise
    fresh: object  # new names for the Lets
    guards: tuple = ()  # conditions known to hold where the accesses of this context run
    memo: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.limits = _limits(self.guards)  # name -> [(op, bound expr)] from the guards

    def interval(self, e):
        """(lo, hi) of e's range over the nest, or None."""
        if e in self.memo:
            return self.memo[e]
        self.memo[e] = None  # a cycle through a binding stays unknown
        self.memo[e] = r = self._interval(e)
        return r

    def _interval(self, e):
        if not e.dtype.is_int or e.dtype.is_bool:
            return None
        if isinstance(e, Const):
            return (int(e.value), int(e.value))
        if not self._inside(e):  # fixed during the nest: its value, once
            if any(True for _ in loads(e)):
                return None
            v = self._temp(as_int64(e))
            return (v, v) if _fits(e.dtype) else self._no_wrap((v, v), e.dtype)
        if isinstance(e, Var):  # values the program really takes: no wrap to check
            b = self.binds.get(e.name)
            if isinstance(b, Let):
                r = self.interval(b.value)
            elif isinstance(b, For):
                r = self._loop_range(b)
            else:
                return None
            return self._limit(e.name, r)
        if isinstance(e, Call):
            r = self._call(e)
            return None if r is None else self._no_wrap(r, e.dtype)
        return None

    def _limit(self, name: str, r):
        """r narrowed by the guards' comparisons of `name` (`ih >= 0`, `r < rows`). r may
        be None (a value read from an array): the guards alone then bound the variable,
        when they bound it on both sides (its one binding holds wherever it is read)."""
        lo, hi = r or (None, None)
        for op, bound in self.limits.get(name, ()):
            b = self.interval(bound)
            if b is None:
                continue
            if op in (Op.LT, Op.LE):
                h = b[1] if op is Op.LE else self._op(Op.SUB, b[1], 1)
                hi = h if hi is None else self._op(Op.MIN, hi, h)
            else:
                lw = b[0] if op is Op.GE else self._op(Op.ADD, b[0], 1)
                lo = lw if lo is None else self._op(Op.MAX, lo, lw)
        return None if lo is None or hi is None else (lo, hi)

    def _loop_range(self, f: For):
        if not isinstance(f.step, Const) or int(f.step.value) == 0:
            return None
        lo, hi = self.interval(f.start), self.interval(f.stop)
        if lo is None or hi is None:
            return None
        if int(f.step.value) > 0:
            return (lo[0], self._op(Op.SUB, hi[1], 1))
        return (self._op(Op.ADD, hi[0], 1), lo[1])

    def _call(self, c: Call):
        op, args = c.op, c.args
        if op in (Op.CAST, Op.CAST_SAT) and args[0].dtype.is_int and not args[0].dtype.is_bool:
            return self.interval(args[0])  # c's dtype is checked by the caller
        if op is Op.MUL and isinstance(args[0], Const):
            args = (args[1], args[0])
        if op not in _ARITH or (op in _BY_CONST and not isinstance(args[1], Const)):
            return None
        a = [self.interval(x) for x in args]
        if any(x is None for x in a):
            return None
        if op is Op.MOD:  # floor modulo by k > 0 lies in [0, k - 1]
            k = int(args[1].value)
            return (0, k - 1) if k > 0 else None
        if op in (Op.MUL, Op.FLOORDIV):
            k = int(args[1].value)
            if op is Op.FLOORDIV and k <= 0:
                return None
            lo, hi = self._op(op, a[0][0], k), self._op(op, a[0][1], k)
            return (lo, hi) if k >= 0 else (hi, lo)
        if op is Op.ADD:
            return (self._op(op, a[0][0], a[1][0]), self._op(op, a[0][1], a[1][1]))
        if op is Op.SUB:
            return (self._op(op, a[0][0], a[1][1]), self._op(op, a[0][1], a[1][0]))
        if op is Op.NEG:
            return (self._op(Op.SUB, 0, a[0][1]), self._op(Op.SUB, 0, a[0][0]))
        return (self._op(op, a[0][0], a[1][0]), self._op(op, a[0][1], a[1][1]))

    def _op(self, op: Op, a, b):
        """`a op b`: folded when both are known, else a new Let."""
        if isinstance(a, int) and isinstance(b, int):
            return _FOLD[op](a, b)
        if op in (Op.ADD, Op.SUB) and b == 0 or op in (Op.MUL, Op.FLOORDIV) and b == 1:
            return a
        if op is Op.ADD and a == 0:
            return b
        return self._temp(Call(op, (_const(a), _const(b)), int64))

    def _no_wrap(self, r, dt):
        """r, if it lies inside dt and int32 (so computing it in dt cannot wrap): checked
        now for known bounds, else by a condition of the nest's test."""
        mn, mx = max(int(dt.min_value), _I32[0]), min(int(dt.max_finite), _I32[1])
        for cond in (_cmp(Op.LE, mn, r[0]), _cmp(Op.LE, r[1], mx)):
            if not isinstance(cond, Const):
                self.conds[cond] = None
        if isinstance(r[0], int) and r[0] < mn or isinstance(r[1], int) and r[1] > mx:
            return None
        return r

    def _temp(self, e):
        """e itself when it is a variable or a cast of one, else a Let's variable bound to it."""
        if isinstance(e, Var) or isinstance(e, Call) and e.op is Op.CAST and isinstance(
                e.args[0], Var):
            return e
        v = Var(self.fresh("b"), int64)
        self.lets.append(Let(v, e))
        return v

    def _inside(self, e) -> bool:
        if isinstance(e, Var):
            return e.name in self.binds
        if isinstance(e, Call):
            return any(self._inside(a) for a in e.args)
        if isinstance(e, Load):
            return any(self._inside(i) for i in e.indices)
        return False


def _fits(dt) -> bool:
    """Every value of dt lies inside int32."""
    return _I32[0] <= int(dt.min_value) and int(dt.max_finite) <= _I32[1]


def _limits(guards: tuple) -> dict:
    """Per variable name, the comparisons `name op bound` the guards assert (conjunctions
    are split; a comparison written `bound op name` is flipped)."""
    out: dict = {}
    todo = list(guards)
    while todo:
        c = todo.pop()
        if not isinstance(c, Call):
            continue
        if c.op is Op.AND:
            todo += list(c.args)
            continue
        if c.op not in FLIP:
            continue
        x, y = c.args
        if not (x.dtype.is_int and y.dtype.is_int):
            continue
        if isinstance(x, Var):
            out.setdefault(x.name, []).append((c.op, y))
        if isinstance(y, Var):
            out.setdefault(y.name, []).append((FLIP[c.op], x))
    return out

