"""Static analyses of a PrimFunc at given sizes: flop, op and byte counts (`count`).

Counts what the program says it does, times the launch grid and loop trip counts, with
scalar values evaluated by the op table's reference; docs/ir.md has the conventions. Never
runs a kernel or touches data: data-dependent control flow is bounded and flagged (`exact`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var
from tilepy.ir.ops import OPS, Compute, Op, reference
from tilepy.ir.stmt import (
    Alloc,
    For,
    If,
    Launch,
    Let,
    PrimFunc,
    Store,
    Versioned,
    While,
)
from tilepy.ir.tileops import STMTS, TileRules, entry
from tilepy.ir.types import compute_dtype


@dataclass(frozen=True)
class Counts:
    """What one call of a kernel does, summed over all blocks and loop iterations.

    - `flops`: floating-point operations: 2*M*N*K per gemm, plus float elementwise and
      transcendental ops, plus one per combined element of float reductions, cumsums and
      atomic adds. `gemm_flops` is the gemm part alone.
    - `ops`: scalar and tile-op element counts by category: float, int, logic, compare,
      select, transcendental, convert (casts and dtype-converting copies), reduce, cumsum,
      atomic_add.
    - `bytes_read` / `bytes_written`: by scope name ("global", "shared", "fragment",
      "local", "var"), in storage bytes (numpy itemsize: 4-bit formats take one byte).
    - `exact`: False when data-dependent control flow was met; `notes` say where and how
      it was bounded.
    """

    flops: int = 0
    gemm_flops: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    bytes_read: dict[str, int] = field(default_factory=dict)
    bytes_written: dict[str, int] = field(default_factory=dict)
    exact: bool = True
    notes: tuple[str, ...] = ()

    @property
    def global_read(self) -> int:
        return self.bytes_read.get("global", 0)

    @property
    def global_written(self) -> int:
        return self.bytes_written.get("global", 0)

    @property
    def global_bytes(self) -> int:
        return self.global_read + self.global_written

    def intensity(self) -> float:
        """Flops per byte of global traffic (the roofline's x axis)."""
        return self.flops / self.global_bytes if self.global_bytes else math.inf


def count(func: PrimFunc, sizes: dict[str, int]) -> Counts:
    """Flop, op and byte counts of one call of `func` with the symbolic sizes `sizes`.

    Edge tiles are counted full: a region counts its extents as written, including the
    part past a global buffer's end (reads of 0, dropped writes). Loops whose bounds use a
    block or loop variable are evaluated per block / per iteration; everything else is
    evaluated once and multiplied. Data-dependent ifs count the larger branch (elementwise
    maximum), while loops and data-dependent loop bounds one iteration; both clear `exact`.
    """
    missing = [v.name for v in func.sizes if v.name not in sizes]
    if missing:
        raise ValueError(f"count() needs a value for every size; missing {', '.join(missing)}")
    env = {v.name: int(sizes[v.name]) for v in func.sizes}
    counter = _Counter()
    tally = counter.body(func.body, env)
    return _to_counts(tally, counter.notes)


def _to_counts(t: Counter, notes: list[str]) -> Counts:
    by = lambda kind: {k[1]: v for k, v in t.items() if k[0] == kind and v}  # noqa: E731
    flops = by("flops")
    return Counts(
        flops=sum(flops.values()), gemm_flops=flops.get("gemm", 0), ops=by("ops"),
        bytes_read=by("read"), bytes_written=by("write"), exact=not notes,
        notes=tuple(dict.fromkeys(notes)),
    )


# ---------------------------------------------------------------- scalar evaluation


class _Unknown(Exception):
    """A value this analysis cannot know here: `name` is the variable (a block or loop
    variable not yet made concrete), or None when it depends on data."""

    def __init__(self, name: str | None):
        super().__init__(name)
        self.name = name


_DATA = object()  # env marker: a let bound to a data-dependent value


def _abstract(name: str):
    return ("abstract", name)


def evaluate(e, env: dict):
    """The Python value of a scalar expression over `env` (name -> value), computed with
    the op table's reference. Raises _Unknown on a Load or an abstract variable."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        v = env.get(e.name, _DATA)
        if v is _DATA:
            raise _Unknown(None)
        if isinstance(v, tuple):
            raise _Unknown(v[1])
        return v
    if isinstance(e, Load):
        raise _Unknown(None)
    assert isinstance(e, Call), e
    args = [np.asarray(evaluate(a, env), dtype=compute_dtype(a.dtype)) for a in e.args]
    out = reference(e.op, args, tuple(a.dtype for a in e.args), e.dtype)
    return np.asarray(out).item()


def _category(c: Call) -> str:
    row = OPS[c.op]
    if row.compute is Compute.CONVERT:
        return "convert"
    if row.compute is Compute.F64:
        return "transcendental"
    if row.compute is Compute.COMPARE:
        return "compare"
    if c.op is Op.SELECT:
        return "select"
    return "logic" if c.dtype.is_bool else "int" if c.dtype.is_int else "float"


def _expr_tally(e, t: Counter) -> None:
    """Ops and loads of one evaluation of an expression (or a region's bounds: none)."""
    if isinstance(e, Load):
        t["read", e.buffer.scope.value] += e.buffer.dtype.itemsize
        for i in e.indices:
            _expr_tally(i, t)
    elif isinstance(e, Call):
        cat = _category(e)
        t["ops", cat] += 1
        if cat in ("float", "transcendental"):
            t["flops", "elementwise"] += 1
        for a in e.args:
            _expr_tally(a, t)


def _where(loc) -> str:
    return str(loc) if loc.line else "(no source line)"


def _scaled(t: Counter, n: int) -> Counter:
    return Counter({k: v * n for k, v in t.items()})


# ---------------------------------------------------------------- statements


class _Counter:
    def __init__(self):
        self.notes: list[str] = []

    def body(self, stmts, env: dict) -> Counter:
        env = dict(env)
        total = Counter()
        for s in stmts:
            rules = STMTS[type(s)].tile
            if rules is not None:
                total.update(self.tile_op(s, rules, env))
            else:
                total.update(getattr(self, "s_" + type(s).__name__)(s, env))
        return total

    def elems(self, r: Region, env: dict) -> int:
        return math.prod(int(evaluate(e, env)) for e in r.extents)

    def move(self, t: Counter, kind: str, r: Region | Buffer, n: int) -> None:
        buf = r.buffer if isinstance(r, Region) else r
        t[kind, buf.scope.value] += n * buf.dtype.itemsize

    def s_Alloc(self, s: Alloc, env: dict) -> Counter:
        return Counter()

    s_Breakpoint = s_Print = s_Assert = s_Alloc  # type: ignore[assignment]

    def s_Let(self, s: Let, env: dict) -> Counter:
        try:
            env[s.var.name] = evaluate(s.value, env)
        except _Unknown as u:
            env[s.var.name] = _DATA if u.name is None else _abstract(u.name)
        t = Counter()
        _expr_tally(s.value, t)
        return t

    def s_Store(self, s: Store, env: dict) -> Counter:
        t = Counter()
        for e in (*s.indices, s.value):
            _expr_tally(e, t)
        self.move(t, "write", s.buffer, 1)
        return t

    def tile_op(self, s, rules: TileRules, env: dict) -> Counter:
        """A tile op: the elements of each region it reads (and of each it writes, and
        reads again when it accumulates), the ops of its expressions, and the work its
        table entry counts."""
        d, t = entry(s), Counter()
        for f in d.reads:
            x = getattr(s, f)
            if isinstance(x, Region):
                self.move(t, "read", x, self.elems(x, env))
            else:
                _expr_tally(x, t)
        for f in d.writes:
            r = getattr(s, f)
            if d.updates(s):
                self.move(t, "read", r, self.elems(r, env))
            self.move(t, "write", r, self.elems(r, env))
        t.update(rules.work(s, lambda r: tuple(int(evaluate(e, env)) for e in r.extents)))
        return t

    def s_If(self, s: If, env: dict) -> Counter:
        t = Counter()
        _expr_tally(s.cond, t)
        try:
            taken = s.then_body if evaluate(s.cond, env) else s.else_body
            t.update(self.body(taken, env))
        except _Unknown as u:
            if u.name is not None:
                raise
            self.notes.append(f"data-dependent if at {_where(s.loc)}: counted its larger branch")
            a, b = self.body(s.then_body, env), self.body(s.else_body, env)
            t.update({k: max(a[k], b[k]) for k in a.keys() | b.keys()})
        return t

    def s_Versioned(self, s: Versioned, env: dict) -> Counter:
        """Counted as its fallback, the statements the pass started from: a version that
        moves work around (fused rows, unchecked accesses) does the same operations."""
        return self.body(s.fallback, env)

    def s_While(self, s: While, env: dict) -> Counter:
        self.notes.append(f"while loop at {_where(s.loc)}: counted one iteration")
        t = Counter()
        _expr_tally(s.cond, t)
        t.update(self.body(s.body, env))
        return t

    def s_For(self, s: For, env: dict) -> Counter:
        try:
            start, stop, step = (int(evaluate(e, env)) for e in (s.start, s.stop, s.step))
            values = range(start, stop, step) if step else range(0)
        except _Unknown as u:
            if u.name is not None:
                raise
            self.notes.append(f"loop at {_where(s.loc)} has data-dependent bounds: counted once")
            values = None
        if values is None:
            return self.body(s.body, {**env, s.var.name: _DATA})
        return self.repeat(s.body, env, [s.var], [values])

    def s_Launch(self, s: Launch, env: dict) -> Counter:
        extents = [range(int(evaluate(g, env))) for g in s.grid]
        return self.repeat(s.body, env, list(s.block_vars), extents)

    def repeat(self, body, env: dict, vars_: list[Var], ranges: list[range]) -> Counter:
        """The body's counts summed over all values of `vars_`: once with them abstract and
        multiplied, or value by value when the counts depend on them."""
        n = math.prod(len(r) for r in ranges)
        if n == 0:
            return Counter()
        names = {v.name for v in vars_}
        try:
            inner = {**env, **{v.name: _abstract(v.name) for v in vars_}}
            return _scaled(self.body(body, inner), n)
        except _Unknown as u:
            if u.name not in names:
                raise
        total = Counter()
        for values in itertools.product(*ranges):
            total.update(self.body(body, {**env, **dict(zip([v.name for v in vars_], values))}))
        return total
