"""Bounds checks in generated code: which accesses need a run-time check, and its code.
Block-local buffers: an interval analysis proves most accesses (no code), a tile op checks
each local region once, other element indices are checked per element. Global element
loads and stores outside the array give the safe value / are skipped (TileLang's rule), or in
strict mode are checked (tile ops clip edge tiles instead: regions.py). A failed check
records a fault (faults.py); the launch raises after its blocks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from tilepy.ir.errors import LoweringError
from tilepy.ir.expr import Buffer, Call, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, Let, walk
from tilepy.jit.faults import FAULT_COLS, MAX_CHECKED_RANK
from tilepy.jit.scalars import Emitter, storage_name
from tilepy.jit.source import Writer

INF = float("inf")
TOP = (-INF, INF)


# ---------------------------------------------------------------- interval analysis


def var_ranges(body, block_vars) -> dict[str, tuple[float, float]]:
    """Per variable name bound in a launch, an interval holding every value it takes (the
    union over its bindings: loops, lets, block ids). Unbound names are unknown (TOP)."""
    binds: dict[str, list] = {}
    for v in block_vars:
        binds.setdefault(v.name, []).append(None)
    for s in walk(body):
        if isinstance(s, (For, Let)):
            binds.setdefault(s.var.name, []).append(s)
    memo: dict[str, tuple[float, float]] = {}

    def var(name: str):
        if name in memo:
            return memo[name]
        if name not in binds:
            return TOP
        memo[name] = TOP  # a cycle through this name stays unknown
        out = None
        for b in binds[name]:
            r = _binding(b, var)
            out = r if out is None else (min(out[0], r[0]), max(out[1], r[1]))
        memo[name] = out
        return out

    return {n: var(n) for n in binds}


def _binding(b, var) -> tuple[float, float]:
    if b is None:  # a block id: 0 .. grid - 1
        return (0, INF)
    if isinstance(b, Let):
        return interval(b.value, var)
    step = b.step
    if not isinstance(step, Const) or int(step.value) == 0:
        return TOP
    lo, hi = interval(b.start, var), interval(b.stop, var)
    if int(step.value) > 0:
        return (lo[0], max(lo[0], hi[1] - 1))
    return (min(hi[0] + 1, lo[1]), lo[1])


def _dtype_range(dt) -> tuple[float, float]:
    if dt.is_bool:
        return (0, 1)
    if dt.is_int:
        return (dt.min_value, dt.max_finite)
    return TOP


def interval(e, var) -> tuple[float, float]:
    """[lo, hi] of an integer expression; `var(name)` gives a variable's interval."""
    if isinstance(e, Const):
        return (e.value, e.value) if not e.dtype.is_float else TOP
    if isinstance(e, Var):
        r = var(e.name)
    elif isinstance(e, Call):
        r = _call(e, var)
    else:  # a load: any value of its dtype
        r = _dtype_range(e.dtype)
    lo, hi = _dtype_range(e.dtype)
    return r if lo <= r[0] and r[1] <= hi else (lo, hi)  # may wrap: the dtype's range


def _call(c: Call, var) -> tuple[float, float]:
    a = [interval(x, var) for x in c.args]
    op = c.op
    if op is Op.ADD:
        return (a[0][0] + a[1][0], a[0][1] + a[1][1])
    if op is Op.SUB:
        return (a[0][0] - a[1][1], a[0][1] - a[1][0])
    if op is Op.NEG:
        return (-a[0][1], -a[0][0])
    if op is Op.MUL:  # endpoint products (0 * inf is 0: a bound, not a value)
        ps = [0 if x == 0 or y == 0 else x * y for x in a[0] for y in a[1]]
        return (min(ps), max(ps))
    if op in (Op.MIN, Op.MAX):
        f = min if op is Op.MIN else max
        return (f(a[0][0], a[1][0]), f(a[0][1], a[1][1]))
    if op is Op.SELECT:
        return (min(a[1][0], a[2][0]), max(a[1][1], a[2][1]))
    if op in (Op.CAST, Op.CAST_SAT) and c.args[0].dtype.is_int and c.dtype.is_int:
        return a[0]
    d = a[1] if len(a) > 1 else None
    if op is Op.FLOORDIV and d and d[0] == d[1] and d[0] > 0:
        return (a[0][0] // d[0], a[0][1] // d[0])
    if op is Op.MOD and d and d[0] == d[1] and d[0] > 0:
        return a[0] if 0 <= a[0][0] and a[0][1] < d[0] else (0, d[0] - 1)
    return _dtype_range(c.dtype)


# ---------------------------------------------------------------- checks in the source


@dataclass
class Site:
    """One checked access: what it does, to which buffer, and the user's line."""

    what: str  # "read" / "write", or "assert" (then `buf` is None and `msg` its text)
    buf: Buffer | None
    loc: object
    msg: str = ""


@dataclass
class Faults:
    """The checked accesses of one launch and the names the checks use."""

    flt: str  # the fault record (one row per thread, see faults._record)
    blk: str  # the block function's linear block id
    sites: list[Site] = field(default_factory=list)

    def site(self, what: str, buf: Buffer | None, loc, msg: str = "") -> int:
        self.sites.append(Site(what, buf, loc, msg))
        return len(self.sites) - 1

    def raise_function(self, name: str, grid: list[str]) -> Writer:
        """A function the entry calls after the launch: raise the recorded fault of the
        lowest block (its first fault in program order), if any."""
        w = Writer()
        g = ", ".join(grid)
        w.line(f"def {name}({self.flt}{', ' + g if g else ''}):")
        with w.indent():
            w.line('"""Raise the first bounds fault the launch below recorded, if any."""')
            w.line(f"_r = _first_fault({self.flt})")
            w.line("if _r < 0:")
            w.line("    return")
            w.line(f"_row = {self.flt}[_r]")
            dims = ", ".join((grid + ["1", "1", "1"])[:3])
            row = ", ".join(f"_row[{k}]" for k in range(FAULT_COLS))
            for k, site in enumerate(self.sites):
                loc = site.loc
                file = os.path.abspath(loc.file) if loc is not None and loc.line else ""
                line, col = (loc.line, loc.col) if loc is not None else (0, 0)
                w.line(f"if _row[1] == {k}:")
                if site.what == "assert":
                    w.line(f"    raise CompiledAssertionError({site.msg!r}, {file!r}, {line}, "
                           f"{col}, {len(grid)}, {dims}, {row})")
                    continue
                w.line(f"    raise CompiledBoundsError({site.what!r}, {site.buf.name!r}, "
                       f"{site.buf.ndim}, {file!r}, {line}, {col}, "
                       f"{len(grid)}, {dims}, {row})")
        return w


def _static(e) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _sizes(ref_name: str, buf: Buffer) -> list[str]:
    return [str(_static(e)) if _static(e) is not None else f"{ref_name}.shape[{d}]"
            for d, e in enumerate(buf.shape)]


@dataclass
class CheckedEmitter(Emitter):
    """The Emitter of a block function: element accesses of local arrays are checked
    unless proven in range, element accesses of global arrays always; `logs` are the
    launch's atomic logs (jit/atomics.py)."""

    ranges: dict = field(default_factory=dict)
    faults: Faults | None = None
    logs: dict = field(default_factory=dict)
    origin: dict = field(default_factory=dict)  # source text -> the IR expr it came from
    verified: set = field(default_factory=set)  # accesses a Versioned proved in range here
    fusion: dict = field(default_factory=dict)  # (id(body), start) -> jit/passes/fusion.py Run

    @classmethod
    def inside(cls, em: Emitter, **kw) -> "CheckedEmitter":
        """A block emitter sharing `em`'s names, buffers, variables and codecs."""
        return cls(**{f.name: getattr(em, f.name) for f in fields(Emitter)}, **kw)

    def _range(self, name: str):
        return self.ranges.get(name, TOP)

    def proven(self, e, n: int | None, ext: int = 1) -> bool:
        """e .. e + ext - 1 lies in [0, n) for every value e can take."""
        if n is None:
            return False
        lo, hi = interval(e, self._range)
        return lo >= 0 and hi + ext <= n

    def expr(self, e) -> str:
        kind = self.ref(e.buffer).kind if isinstance(e, Load) and e.indices else None
        if kind == "array":
            idx = [self.expr(i) for i in e.indices]
            out = f"{self.ref(e.buffer).name}[{self._index(e.buffer, e.indices, idx, 'read')}]"
        elif kind == "global" and self.faults is not None:
            out = self.global_load(e)
        else:
            out = super().expr(e)
        self.origin[out] = e
        return out

    def store(self, buf: Buffer, idx: list[str], value: str, guarded: bool = True) -> list[str]:
        """Element stores (`buf[i, j] = v`: every index came from `expr`) are checked;
        a tile op's indices are region-checked once per op (see `check_region`)."""
        r = self.ref(buf)
        if r.kind == "array" and idx and all(i in self.origin for i in idx):
            exprs = [self.origin[i] for i in idx]
            return [f"{r.name}[{self._index(buf, exprs, idx, 'write')}] = {value}"]
        return super().store(buf, idx, value, guarded)

    def global_load(self, e: Load) -> str:
        """A global element load: unchecked where a Versioned's `inbounds` lists it, else the
        safe value outside the array (strict mode: 0 and a recorded fault)."""
        idx = [self.expr(i) for i in e.indices]
        if (e.buffer, e.indices) in self.verified:
            return self.load_unguarded(e.buffer, _unsigned(idx))
        if not self.strict:  # TileLang's rule: the safe value outside the array
            return self.load(e.buffer, idx)
        self._check_strict_rank(e.buffer)
        site = self.faults.site("read", e.buffer, self.loc)
        raw = (f"_gld{len(idx)}({self._fault_args(site)}, {self.ref(e.buffer).name}, "
               f"{', '.join(idx)}, {storage_name(e.buffer.dtype)}(0))")
        return self.decode(raw, e.buffer.dtype)

    def element_store(self, buf: Buffer, idx: list[str], value: str) -> list[str]:
        """`buf[i, j] = v` (a Store statement; every index came from `expr`). Into a
        global array: unchecked where a Versioned's `inbounds` lists it, else checked (a write
        outside is a recorded fault); tile ops' global edge tiles are clipped instead."""
        if self.ref(buf).kind != "global" or self.faults is None:
            return self.store(buf, idx, value)
        exprs = tuple(self.origin.get(i) for i in idx)
        if (buf, exprs) in self.verified:
            return super().store(buf, _unsigned(idx), value, guarded=False)
        if not self.strict:  # TileLang's rule: a store outside the array is skipped
            return super().store(buf, idx, value, guarded=True)
        lines = super().store(buf, idx, value, guarded=False)
        return [f"if {self.global_check(buf, idx, 'write')}:"] + ["    " + ln for ln in lines]

    def global_check(self, buf: Buffer, idx: list[str], what: str) -> str:
        """A condition: the element buf[idx] of a global array exists (else the fault is
        recorded in strict mode). The caller runs the access only under it."""
        self._check_rank(buf)
        if not self.strict:
            return f"_in{len(idx)}({self.ref(buf).name}, {', '.join(idx)})"
        self._check_strict_rank(buf)
        site = self.faults.site(what, buf, self.loc)
        return f"_gin{len(idx)}({self._fault_args(site)}, {self.ref(buf).name}, {', '.join(idx)})"

    def _check_strict_rank(self, buf: Buffer) -> None:
        if buf.ndim > MAX_CHECKED_RANK:
            raise LoweringError(
                f"strict mode checks global element accesses of rank 1..{MAX_CHECKED_RANK}; "
                f"'{buf.name}' has rank {buf.ndim}", loc=self.loc,
                hint="run it without strict=True (accesses outside are then masked), or "
                     "in the interpreter, whose strict mode has no such limit")

    def _fault_args(self, site: int) -> str:
        return f"{self.faults.flt}, {self.faults.blk}, {site}"

    def _index(self, buf: Buffer, exprs, idx: list[str], what: str) -> str:
        plain = ", ".join(idx)
        if self.faults is None or not 1 <= len(idx) <= MAX_CHECKED_RANK:
            return plain
        if all(self.proven(e, _static(n)) for e, n in zip(exprs, buf.shape)):
            return plain
        site = self.faults.site(what, buf, self.loc)
        sizes = _sizes(self.ref(buf).name, buf)
        return f"_ck{len(idx)}({self._fault_args(site)}, {plain}, {', '.join(sizes)})"


def check_region(em: Emitter, w: Writer, region, starts: list[str], exts: list[str],
                 what: str) -> None:
    """Once per tile op: a local region must lie inside its buffer. Emits nothing when the
    analysis proves it; else a check that records the fault and ends the block."""
    if not isinstance(em, CheckedEmitter) or em.faults is None:
        return
    buf = region.buffer
    if not 1 <= buf.ndim <= MAX_CHECKED_RANK:
        return
    ok = []
    for s, e, n in zip(region.starts, region.extents, buf.shape):
        ext_hi = interval(e, em._range)[1]
        ok.append(em.proven(s, _static(n), ext_hi) if ext_hi >= 0 else False)
    if all(ok):
        return
    site = em.faults.site(what, buf, em.loc)
    sizes = _sizes(em.ref(buf).name, buf)

    def tup(xs):
        return "(" + "".join(f"np.int64({x}), " for x in xs) + ")"

    w.line(f"if not _region({em.faults.flt}, {em.faults.blk}, {site}, {tup(starts)}, "
           f"{tup(exts)}, {tup(sizes)}):")
    w.line("    return  # a local region outside its buffer: the launch raises")


def _unsigned(idx: list[str]) -> list[str]:
    """Indices proven inside their array, as uint64: Numba then drops its negative-index
    wraparound code (docs/perf-log.md)."""
    return [i if i.isdigit() else f"np.uint64({i})" for i in idx]
