"""Deterministic T.atomic_add in parallel launches: per-block logs replayed in block order.

Owns the decision (log or serial), the logs' sizes and the replay (tiles.py emits the
appends): blocks run in parallel, each add appending (flat index, value) to its block's
log, then one serial pass applies the logs block by block: the interpreter's adds and bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilepy.ir.errors import LoweringError
from tilepy.ir.expr import Buffer, Call, Const, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    AtomicAdd,
    Breakpoint,
    For,
    ForKind,
    If,
    Launch,
    Let,
    Print,
    Versioned,
    While,
    branches,
    walk,
)
from tilepy.ir.tileops import reads
from tilepy.ir.types import Scope, compute_dtype
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer


@dataclass
class Log:
    """One atomic destination's per-block log: `idx[blk, k]` (flat element index) and
    `val[blk, k]` (the value, already in the destination's dtype); `count[blk]` entries."""

    buf: Buffer  # the root (a kernel parameter)
    idx: str
    val: str
    count: str
    n: str  # the block function's running count
    cap: str  # entries per block (source, evaluated before the launch)

    def arrays(self) -> list[str]:
        return [self.idx, self.val, self.count]

    def append(self, em: Emitter, name: str, ndim: int, idx: list[str], value: str,
               blk: str) -> list[str]:
        """Lines appending buf[idx] += value to the log (`name`: the buffer as the block
        sees it, maybe a re-view: its flat index is the root's)."""
        flat = f"np.int64({idx[0]})"
        for d in range(1, ndim):
            flat = f"({flat} * {name}.shape[{d}] + np.int64({idx[d]}))"
        return [f"{self.idx}[{blk}, {self.n}] = {flat}",
                f"{self.val}[{blk}, {self.n}] = {value}",
                f"{self.n} += 1"]


@dataclass
class Plan:
    """How a launch with atomics runs: `logs` by root name (parallel), or `serial` with the
    reason (the blocks then run in order and add in place)."""

    logs: dict[str, Log]
    serial: str | None


def plan(s: Launch, em: Emitter) -> Plan:
    """Decide log or serial for a launch; `em` is the emitter at the launch (its variables
    are what the code before the launch can evaluate)."""
    adds = [x for x in walk(s.body) if isinstance(x, AtomicAdd)]
    if adds:
        check_lane_order(s.body)
    prints = [x for x in walk(s.body) if isinstance(x, (Print, Breakpoint))]
    if prints:
        return Plan({}, "the launch prints: blocks run in order" if adds or prints else None)
    if not adds:
        return Plan({}, None)
    dests = {a.dst.buffer.root.name: a.dst.buffer.root for a in adds
             if a.dst.buffer.root.scope is Scope.GLOBAL}
    if not dests:
        return Plan({}, None)
    touched = _touched(s.body) & set(dests)
    if touched:
        return Plan({}, f"the launch also reads or writes {', '.join(sorted(touched))} "
                        "outside its atomic adds, which must see earlier blocks' adds")
    logs = {}
    for name, buf in dests.items():
        cap = _count(s.body, name, em)
        if cap is None:
            return Plan({}, f"the number of atomic adds to {name} per block is not known "
                            "before the launch (a while loop, or loop bounds that depend on "
                            "the block)")
        t = em.names.temp
        logs[name] = Log(buf, t("li"), t("lv"), t("ln"), t("nl"), str(cap))
    return Plan(logs, None)


# ---------------------------------------------------------------- order inside T.Parallel


def check_lane_order(body) -> None:
    """Refuse atomic adds whose order the JIT's loops would change.

    The interpreter runs a T.Parallel body one statement at a time over all its lanes
    (and a serial loop inside it iteration by iteration over all lanes); the JIT runs each
    lane's whole body before the next lane's. The two orders apply the same adds to one
    element in different sequences, and float adds round differently, when a parallel
    nest holds two atomic adds to one buffer, or one under a serial loop or `while`.
    One atomic add per lane and destination gives the same order in both."""
    for st in body:
        if isinstance(st, For) and st.kind is ForKind.PARALLEL:
            _check_nest(st)
        elif isinstance(st, (For, While)):
            check_lane_order(st.body)
        elif isinstance(st, (If, Versioned)):
            for b in branches(st):
                check_lane_order(b)


def _check_nest(nest: For) -> None:
    seen: dict[str, AtomicAdd] = {}
    lets: dict = {}  # name -> its value, for names bound once in the nest
    for s in walk(nest.body):
        if isinstance(s, Let):
            lets[s.var.name] = None if s.var.name in lets else s.value

    def visit(stmts, serial: str | None) -> None:
        for st in stmts:
            if isinstance(st, AtomicAdd):
                name = st.dst.buffer.root.name
                why = None
                if serial:
                    why = f"it sits under {serial} inside the T.Parallel loop"
                elif name in seen and not _apart(seen[name], st, lets):
                    why = (f"the same T.Parallel loop also adds to {name} at line "
                           f"{seen[name].loc.line}")
                if why:
                    raise LoweringError(
                        f"T.atomic_add to {name}: {why}; the interpreter applies such adds "
                        "statement by statement over all lanes, the JIT lane by lane, and "
                        "the float results would differ", loc=st.loc,
                        hint="put each atomic add in its own T.Parallel loop (or hoist the "
                             "serial loop out of it), or run this kernel in the interpreter")
                seen[name] = st
            elif isinstance(st, For):
                inner = serial if st.kind is ForKind.PARALLEL else \
                    (serial or f"the serial loop over '{st.var.name}'")
                visit(st.body, inner)
            elif isinstance(st, While):
                visit(st.body, serial or "a while loop")
            elif isinstance(st, (If, Versioned)):
                for b in branches(st):
                    visit(b, serial)

    visit(nest.body, None)


def _apart(a: AtomicAdd, b: AtomicAdd, lets: dict) -> bool:
    """Whether two element atomic adds can never hit one element, whatever their lanes: in
    some dimension both indices are `sum(c_i * v_i) + k` with every c_i a multiple of g
    and the two k different modulo g (`T.atomic_addx2`'s `n + 0`, `n + 1` with n even)."""
    if a.dst.buffer.data is not None or b.dst.buffer.data is not None:
        return False
    if any(not isinstance(e, Const) or int(e.value) != 1
           for e in a.dst.extents + b.dst.extents):
        return False
    for x, y in zip(a.dst.starts, b.dst.starts):
        fx, fy = _affine(x, lets), _affine(y, lets)
        if fx is None or fy is None:
            continue
        g = 0
        for f in (fx, fy):
            for k, c in f.items():
                g = math.gcd(g, c) if k is not None else g
        if g != 1 and (fx.get(None, 0) - fy.get(None, 0)) % (g or 1 << 62) != 0:
            return True
    return False


def _affine(e, lets: dict, depth: int = 0) -> dict | None:
    """e as {variable name: coefficient, None: constant} through the nest's lets."""
    if depth > 16:
        return None
    if isinstance(e, Const):
        return {None: int(e.value)} if e.dtype.is_int and not e.dtype.is_bool else None
    if isinstance(e, Var):
        if e.name in lets:
            return None if lets[e.name] is None else _affine(lets[e.name], lets, depth + 1)
        return {e.name: 1}
    if not isinstance(e, Call) or e.op not in (Op.ADD, Op.SUB, Op.MUL):
        return None
    fa, fb = (_affine(x, lets, depth + 1) for x in e.args)
    if fa is None or fb is None:
        return None
    if e.op is Op.MUL:
        if set(fa) == {None}:
            fa, fb = fb, fa
        if set(fb) != {None}:
            return None
        return {k: c * fb[None] for k, c in fa.items()}
    sign = 1 if e.op is Op.ADD else -1
    out = dict(fa)
    for k, c in fb.items():
        out[k] = out.get(k, 0) + sign * c
    return out


# ---------------------------------------------------------------- who touches what


def _touched(body) -> set[str]:
    """Root buffers read or written by anything other than an atomic add's own update."""
    out: set[str] = set()
    for s in walk(body):
        own = isinstance(s, AtomicAdd)  # its update of dst is what the logs order
        out.update(b.root.name for b in reads(s, updates=not own))
        if not own:
            out.update(b.root.name for b in s.writes())
    return out


# ---------------------------------------------------------------- static log sizes


def _count(body, name: str, em: Emitter):
    """An upper bound on the atomic element adds to `name` one block makes: an int, a
    source expression evaluable before the launch, or None when there is none."""
    total = 0
    for s in body:
        if isinstance(s, AtomicAdd) and s.dst.buffer.root.name == name:
            n = 1
            for e in s.dst.extents:
                n = _mul(n, _before(e, em))
            total = _add(total, n)
        elif isinstance(s, For):
            inner = _count(s.body, name, em)
            if inner != 0:
                total = _add(total, _mul(_trips(s, em), inner))
        elif isinstance(s, (If, Versioned)):
            a, b = (_count(x, name, em) for x in branches(s))
            total = _add(total, a if b == 0 else (b if a == 0 else _max(a, b)))
        elif isinstance(s, While) and _count(s.body, name, em) != 0:
            return None
        if total is None:
            return None
    return total


def _before(e, em: Emitter):
    """e as an int or as source the code before the launch can evaluate, else None."""
    if isinstance(e, Const):
        return int(e.value)
    if _free(e, em):
        return f"np.int64({em.expr(e)})"
    return None


def _free(e, em: Emitter) -> bool:
    if isinstance(e, Var):
        return e.name in em.vars
    if isinstance(e, Call):
        return all(_free(a, em) for a in e.args)
    return isinstance(e, Const)


def _trips(s: For, em: Emitter):
    if not isinstance(s.step, Const) or int(s.step.value) == 0:
        return None
    step = int(s.step.value)
    a, b = _before(s.start, em), _before(s.stop, em)
    if a is None or b is None:
        return None
    lo, hi = (a, b) if step > 0 else (b, a)
    if isinstance(lo, int) and isinstance(hi, int):
        return max(0, -(-(hi - lo) // abs(step)))
    return f"max(0, ({hi} - {lo} + {abs(step) - 1}) // {abs(step)})"


def _add(a, b):
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return f"({a} + {b})"


def _mul(a, b):
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return f"({a} * {b})"


def _max(a, b):
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return f"max({a}, {b})"


# ---------------------------------------------------------------- replay


def replay_function(em: Emitter, name: str, log: Log, target: str) -> Writer:
    """`name(idx, val, count, target)`: the logged adds into `target` (the root array),
    block by block, each log in order: the serial launch's adds, bit for bit."""
    from tilepy.jit.tiles import combine

    dt = log.buf.dtype
    w = Writer()
    w.line(f"def {name}({log.idx}, {log.val}, {log.count}, {target}):")
    with w.indent():
        w.line('"""Apply the logged atomic adds in block order, then program order."""')
        w.line(f"_flat = {target}.reshape(({target}.size,))")
        w.line(f"for _b in range({log.count}.shape[0]):")
        w.line(f"    for _e in range({log.count}[_b]):")
        w.line(f"        _i = {log.idx}[_b, _e]")
        cur = em.decode("_flat[_i]", dt)
        total = combine(em, Op.ADD, cur, f"{log.val}[_b, _e]", dt)
        w.line(f"        _flat[_i] = {em.encode(total, dt)}")
    return w


def alloc_lines(log: Log, nblocks: str) -> list[str]:
    dt = compute_dtype(log.buf.dtype)
    return [f"{log.idx} = np.empty(({nblocks}, np.int64({log.cap})), np.int64)",
            f"{log.val} = np.empty(({nblocks}, np.int64({log.cap})), np.{dt.name})",
            f"{log.count} = np.zeros({nblocks}, np.int64)"]
