"""Loop versioning for global bounds checks: an outermost T.Parallel nest whose global element
indices can be bounded before it runs is emitted twice, `if <every bounded index range lies
inside its array>: <the nest, those accesses unchecked> else: <the nest, all checked>`, as a
check (its failing side records a fault) keeps LLVM from vectorising the loop around it.
Decides no values: both copies compute the same thing.
"""

from __future__ import annotations

import dataclasses
import operator

from tilepy.ir.expr import Call, Const, Load, Region, Var, loads
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, If, Let, Store, While, walk
from tilepy.jit.source import Writer

_I32 = (-(2**31), 2**31 - 1)


def _exprs(s) -> list:
    """The expressions a statement evaluates (its own fields, not its body's)."""
    out = []
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, Region):
                out += [*x.starts, *x.extents]
            elif isinstance(x, (Const, Var, Load, Call)):
                out.append(x)
    return out


def global_accesses(loop: For, is_global) -> list[tuple]:
    """(buffer, indices, guards) of every global element load and store in the nest, in
    program order: `guards` are the conditions of the enclosing `if`s (then-branches)
    inside the nest, which hold wherever the access runs."""
    out: list[tuple] = []

    def visit(stmts, guards):
        for s in stmts:
            out.extend((ld.buffer, ld.indices, guards)
                       for e in _exprs(s) for ld in loads(e) if ld.indices)
            if isinstance(s, Store) and s.indices:
                out.append((s.buffer, s.indices, guards))
            if isinstance(s, If):
                visit(s.then_body, guards + (s.cond,))
                visit(s.else_body, guards)
            elif isinstance(s, (For, While)):
                visit(s.body, guards)

    visit([loop], ())
    return [acc for acc in out if is_global(acc[0])]


@dataclasses.dataclass
class _Bounds:
    """Emits interval temporaries for the index expressions of one nest. A bound is an int
    (known while lowering) or the name of an int64 temporary."""

    em: object
    w: Writer
    binds: dict  # name -> the For or Let binding it in the nest (None: bound twice)
    conds: dict  # the nest's test: an ordered set of conditions, shared by all contexts
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
            if _has_load(e):
                return None
            v = self._temp("v", self.em.expr(e))
            return (v, v) if _fits(e.dtype) else self._no_wrap((v, v), e.dtype)
        if isinstance(e, Var):  # values the program really takes: no wrap to check
            b = self.binds.get(e.name)
            if isinstance(b, Let):
                r = self.interval(b.value)
            else:
                r = self._loop_range(b) if isinstance(b, For) else None
            return None if r is None else self._limit(e.name, r)
        if isinstance(e, Call):
            r = self._call(e)
            return None if r is None else self._no_wrap(r, e.dtype)
        return None

    def _limit(self, name: str, r):
        """r narrowed by the guards' comparisons of `name` (`ih >= 0`, `r < rows`)."""
        lo, hi = r
        for op, bound in self.limits.get(name, ()):
            b = self.interval(bound)
            if b is None:
                continue
            if op in (Op.LT, Op.LE):
                hi = self._op("min", hi, b[1] if op is Op.LE else self._op("-", b[1], 1))
            else:
                lo = self._op("max", lo, b[0] if op is Op.GE else self._op("+", b[0], 1))
        return (lo, hi)

    def _loop_range(self, f: For):
        if not isinstance(f.step, Const) or int(f.step.value) == 0:
            return None
        lo, hi = self.interval(f.start), self.interval(f.stop)
        if lo is None or hi is None:
            return None
        if int(f.step.value) > 0:
            return (lo[0], self._op("-", hi[1], 1))
        return (self._op("+", hi[0], 1), lo[1])

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
            sym = "*" if op is Op.MUL else "//"
            lo, hi = self._op(sym, a[0][0], k), self._op(sym, a[0][1], k)
            return (lo, hi) if k >= 0 else (hi, lo)
        if op is Op.ADD:
            return (self._op("+", a[0][0], a[1][0]), self._op("+", a[0][1], a[1][1]))
        if op is Op.SUB:
            return (self._op("-", a[0][0], a[1][1]), self._op("-", a[0][1], a[1][0]))
        if op is Op.NEG:
            return (self._op("-", 0, a[0][1]), self._op("-", 0, a[0][0]))
        f = "min" if op is Op.MIN else "max"
        return (self._op(f, a[0][0], a[1][0]), self._op(f, a[0][1], a[1][1]))

    def _op(self, sym: str, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return _FOLD[sym](a, b)
        if sym in ("+", "-") and b == 0 or sym in ("*", "//") and b == 1:
            return a
        if sym == "+" and a == 0:
            return b
        text = f"{sym}({a}, {b})" if sym in ("min", "max") else f"{a} {sym} {b}"
        return self._temp("b", text)

    def _no_wrap(self, r, dt):
        """r, if it lies inside dt and int32 (so computing it in dt cannot wrap): checked
        now for known bounds, else by a condition of the nest's test."""
        mn, mx = max(int(dt.min_value), _I32[0]), min(int(dt.max_finite), _I32[1])
        for cond, known in ((f"{mn} <= {r[0]}", r[0]), (f"{r[1]} <= {mx}", r[1])):
            if not isinstance(known, int):
                self.conds[cond] = None
        if isinstance(r[0], int) and r[0] < mn or isinstance(r[1], int) and r[1] > mx:
            return None
        return r

    def _temp(self, hint: str, text: str) -> str:
        if text.isidentifier():
            return text
        t = self.em.names.temp(hint)
        self.w.line(f"{t} = np.int64({text})")
        return t

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


_ARITH = (Op.ADD, Op.SUB, Op.NEG, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX)
_BY_CONST = (Op.MUL, Op.FLOORDIV, Op.MOD)
_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
         "min": min, "max": max}
_FLIP = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE}


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
        if c.op not in _FLIP:
            continue
        x, y = c.args
        if not (x.dtype.is_int and y.dtype.is_int):
            continue
        if isinstance(x, Var):
            out.setdefault(x.name, []).append((c.op, y))
        if isinstance(y, Var):
            out.setdefault(y.name, []).append((_FLIP[c.op], x))
    return out


def _has_load(e) -> bool:
    if isinstance(e, Load):
        return True
    return isinstance(e, Call) and any(_has_load(a) for a in e.args)


def _binds(loop: For) -> dict:
    binds: dict = {}
    for s in [loop, *walk(loop.body)]:
        if isinstance(s, (For, Let)):
            binds[s.var.name] = None if s.var.name in binds else s
    return binds


def plan(em, w: Writer, loop: For) -> tuple[str, set] | None:
    """Emit the range computation for `loop`'s nest; return the condition under which its
    boundable global accesses are all in range and the set of those accesses (each bounded
    wherever it occurs), or None when no access can be bounded.

    Ranges come from interval arithmetic evaluated at run time, in int64, just before the
    nest: loop variables of the nest range over [start, stop - 1] (their bounds bounded the
    same way), names it binds with `x = ...` take their value's range, and anything else
    without a load is a fixed value computed there. Supported: +, -, unary -, * and floor
    division and modulo by constants, min/max, casts between integer types. A comparison of
    a variable in an enclosing `if` of the nest (`if ih >= 0 and ih < H:`) narrows that
    variable's range for the accesses under it: variables are immutable, so it holds
    wherever they run. Each intermediate range must also lie inside its node's dtype and
    the int32 range, so no index arithmetic in the nest can wrap; otherwise, or for any
    other expression (a load, a non-constant product), that access stays checked in both
    copies. The ranges over-approximate: the test may send a nest to the checked copy
    needlessly, but never skips a needed check."""
    accesses = global_accesses(loop, lambda b: em.ref(b).kind == "global")
    # a dry run finds the accesses bounded at every occurrence; the real run emits the
    # test for those only, so an unbounded access adds no condition
    verified = {(b, tuple(i)) for b, i, _ in accesses}
    verified -= {(b, tuple(i)) for b, i, g in _bound(em, Writer(), loop, accesses)[1]}
    if not verified:
        return None
    conds, failed = _bound(em, w, loop, [a for a in accesses if (a[0], tuple(a[1])) in verified])
    assert not failed, "the dry run bounded these accesses"
    return " and ".join(conds), verified


def _bound(em, w: Writer, loop: For, accesses: list) -> tuple[list, list]:
    """Emit interval code into `w` for `accesses`; (the test's conditions, the accesses
    that could not be bounded)."""
    binds, conds, contexts, failed = _binds(loop), {}, {}, []
    for acc in accesses:
        buf, idx, guards = acc
        if guards not in contexts:
            contexts[guards] = _Bounds(em, w, binds, conds, guards)
        ranges = [contexts[guards].interval(i) for i in idx]
        if any(r is None or isinstance(r[0], int) and r[0] < 0 for r in ranges):
            failed.append(acc)
            continue
        name = em.ref(buf).name
        for d, (lo, hi) in enumerate(ranges):
            if not isinstance(lo, int):
                conds[f"0 <= {lo}"] = None
            conds[f"{hi} < {name}.shape[{d}]"] = None
    return list(conds), failed
