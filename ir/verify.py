"""The IR verifier: `verify(func)` raises VerifyError, at the statement's source location,
on the first broken invariant (docs/ir.md lists them).

It reads the op table's type rules and never changes or runs a program. Checks on shapes
compare static extents only; symbolic extents are the backends' business at run time.
"""

from __future__ import annotations

import functools
import keyword
import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from tilepy.ir.errors import Loc, TileTypeError, VerifyError
from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var
from tilepy.ir.ops import CASTS, Op, result_dtype
from tilepy.ir.printer import format_access, format_shape
from tilepy.ir.stmt import (
    Alloc,
    Assert,
    Breakpoint,
    For,
    If,
    Launch,
    Let,
    PrimFunc,
    Print,
    Store,
    Versioned,
    While,
)
from tilepy.ir.tileops import STMTS, TileRules, display, entry, global_accesses
from tilepy.ir.types import Scope, int32
from tilepy.precision import rounding


def verify(func: PrimFunc) -> None:
    """Raise VerifyError on the first invariant `func` breaks; return None if it is valid."""
    _Verifier(func).run()


@dataclass
class _Env:
    """What a body sees: the vars and buffers bound before it, by name."""

    vars: dict[str, Var] = field(default_factory=dict)
    bufs: dict[str, Buffer] = field(default_factory=dict)
    in_launch: bool = False

    def child(self, in_launch: bool | None = None) -> "_Env":
        inside = self.in_launch if in_launch is None else in_launch
        return _Env(dict(self.vars), dict(self.bufs), inside)


class _Verifier:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.names: dict[str, object] = {}  # every name bound anywhere: bound once

    def fail(self, loc: Loc, message: str, hint: str | None = None):
        raise VerifyError(message, loc, hint)

    # ------------------------------------------------------------ names

    def claim(self, name: str, thing, loc: Loc, again_ok: bool = False) -> None:
        if not name.isidentifier() or keyword.iskeyword(name):
            self.fail(loc, f"{name!r} is not a valid name", "names must be Python identifiers")
        prev = self.names.get(name)
        if prev is not None and (prev != thing or not again_ok):
            self.fail(loc, f"the name {name!r} is bound twice in {self.func.name}",
                      "every size, block variable, loop variable, let and buffer needs its "
                      "own name; rename one of them")
        self.names[name] = thing

    def bind(self, v: Var, env: _Env, loc: Loc) -> None:
        if v.name in self.names:
            self.fail(loc, f"the name {v.name!r} is bound twice in {self.func.name}",
                      "give each loop, let and block variable its own name")
        self.claim(v.name, v, loc)
        env.vars[v.name] = v

    # ------------------------------------------------------------ function

    def run(self) -> None:
        f = self.func
        self.claim(f.name, f, f.loc)
        env = _Env()
        for v in f.sizes:
            self.bind(v, env, f.loc)
            if not v.dtype.is_int:
                self.fail(f.loc, f"size {v.name} must be an integer; got {v.dtype}")
        for p in f.params:
            self.param(p, env)
        n = len(f.params)
        idx = [i % n if -n <= i < n else None for i in f.out_idx]
        if None in idx or len(set(idx)) != len(idx):
            self.fail(f.loc, f"out_idx {list(f.out_idx)} must name distinct parameters "
                             f"(0 to {n - 1}, or negative from the end)")
        self.body(f.body, env)

    def param(self, p: Buffer, env: _Env) -> None:
        if p.scope is not Scope.GLOBAL:
            self.fail(self.func.loc, f"parameter {p.name} must be a global buffer; got "
                                     f"scope {p.scope}", "allocate it inside T.Kernel instead")
        self.claim(p.name, p, self.func.loc)
        for s in p.shape:
            self.index(s, env, self.func.loc, f"a dimension of {p.name}")
        if p.data is not None:
            self.use(p.data, env, self.func.loc)
        env.bufs[p.name] = p

    # ------------------------------------------------------------ expressions

    def expr(self, e, env: _Env, loc: Loc):
        """Check an expression; return its dtype."""
        if isinstance(e, Const):
            if not _representable(e):
                self.fail(loc, f"the literal {e.value!r} is not a {e.dtype} value",
                          f"round it to {e.dtype} first (the front end does), or cast")
            return e.dtype
        if isinstance(e, Var):
            bound = env.vars.get(e.name)
            if bound is None:
                self.fail(loc, f"{e.name} is used but not bound here",
                          "bind it (a size, block or loop variable, or a let) before this use")
            if bound != e:
                self.fail(loc, f"{e.name} is bound as {bound.dtype} but used as {e.dtype}")
            return e.dtype
        if isinstance(e, Load):
            self.access(e.buffer, e.indices, env, loc)
            return e.dtype
        if isinstance(e, Call):
            return self.call(e, env, e.loc if e.loc.line else loc)
        self.fail(loc, f"expected a scalar expression; got {type(e).__name__}")

    def call(self, c: Call, env: _Env, loc: Loc):
        dts = tuple(self.expr(a, env, loc) for a in c.args)
        if c.op in CASTS:
            if len(dts) != 1:
                self.fail(loc, f"{c.op} takes 1 operand; got {len(dts)}")
            if c.op is Op.REINTERPRET and dts[0].bits != c.dtype.bits:
                self.fail(loc, f"reinterpret needs equal widths; got {dts[0]} ({dts[0].bits} "
                               f"bits) as {c.dtype} ({c.dtype.bits} bits)",
                          "use T.cast to convert values")
            return c.dtype
        try:
            want = result_dtype(c.op, dts)
        except TileTypeError as err:
            self.fail(loc, err.message, err.hint)
        if want != c.dtype:
            self.fail(loc, f"{c.op} of {', '.join(map(str, dts))} gives {want}, but the call "
                           f"says {c.dtype}")
        return c.dtype

    def index(self, e, env: _Env, loc: Loc, what: str) -> None:
        dt = self.expr(e, env, loc)
        if not dt.is_int:
            self.fail(loc, f"{what} must be an integer; got {dt}", "cast it with T.cast")

    def access(self, b: Buffer, indices, env: _Env, loc: Loc) -> None:
        self.use(b, env, loc)
        if len(indices) != b.ndim:
            self.fail(loc, f"{b.name} has {b.ndim} dimension(s) {format_shape(b.shape)} but is "
                           f"indexed with {len(indices)}")
        for i in indices:
            self.index(i, env, loc, f"an index of {b.name}")

    def use(self, b: Buffer, env: _Env, loc: Loc) -> None:
        """`b` must be visible here: a parameter, an allocation, or a view of one."""
        seen = env.bufs.get(b.name)
        if seen is not None:
            if seen != b:
                self.fail(loc, f"buffer {b.name} is used as {b.dtype}{format_shape(b.shape)} "
                               f"({b.scope}) but declared as {seen.dtype}"
                               f"{format_shape(seen.shape)} ({seen.scope})")
            return
        if b.data is None:
            hint = ("global buffers must be kernel parameters" if b.scope is Scope.GLOBAL
                    else "allocate it (T.alloc_shared/alloc_fragment/...) inside the T.Kernel "
                         "block before this use")
            self.fail(loc, f"buffer {b.name} is not declared here", hint)
        self.view(b, env, loc)

    def view(self, b: Buffer, env: _Env, loc: Loc) -> None:
        self.use(b.data, env, loc)
        if b.dtype != b.data.dtype or b.scope is not b.data.scope:
            self.fail(loc, f"view {b.name} must have the dtype and scope of {b.data.name} "
                           f"({b.data.dtype}, {b.data.scope}); got {b.dtype}, {b.scope}")
        self.claim(b.name, b, loc, again_ok=True)  # a view is declared where it is used
        for s in b.shape:
            self.index(s, env, loc, f"a dimension of {b.name}")
        env.bufs[b.name] = b

    def region(self, r: Region, env: _Env, loc: Loc) -> None:
        self.use(r.buffer, env, loc)
        n = r.buffer.ndim
        if len(r.starts) != n or len(r.extents) != n:
            self.fail(loc, f"a region of {r.buffer.name} needs {n} dimension(s) like the "
                           f"buffer {format_shape(r.buffer.shape)}; got {len(r.starts)} "
                           f"start(s) and {len(r.extents)} extent(s)")
        for e in (*r.starts, *r.extents):
            self.index(e, env, loc, f"a region bound of {r.buffer.name}")

    # ------------------------------------------------------------ statements

    def body(self, body, env: _Env) -> None:
        for s in body:
            handler = getattr(self, "s_" + type(s).__name__, None)
            rules = STMTS[type(s)].tile if type(s) in STMTS else None
            if rules is not None:
                handler = functools.partial(self.tile_op, rules=rules)
            elif handler is None:
                self.fail(self.func.loc, f"{type(s).__name__} is not an IR statement")
            if not env.in_launch and not isinstance(s, (Launch, Let)):
                self.fail(s.loc, f"{display(s)} outside a T.Kernel block",
                          "kernel bodies go inside `with T.Kernel(...) as (bx, ...):`")
            handler(s, env)

    def s_Alloc(self, s: Alloc, env: _Env) -> None:
        b = s.buffer
        if b.scope is Scope.GLOBAL and b.data is None:
            self.fail(s.loc, f"{b.name} is allocated in global memory",
                      "global buffers are kernel parameters (or re-views of one, "
                      "T.Tensor(shape, dtype, param.data)); allocate shared/fragment/local")
        self.claim(b.name, b, s.loc)
        for d in b.shape:
            self.index(d, env, s.loc, f"a dimension of {b.name}")
        if b.data is not None:
            self.use(b.data, env, s.loc)
            if b.data.dtype != b.dtype:
                self.fail(s.loc, f"view {b.name} must have the dtype of {b.data.name} "
                                 f"({b.data.dtype}); got {b.dtype}")
        env.bufs[b.name] = b

    def s_Let(self, s: Let, env: _Env) -> None:
        dt = self.expr(s.value, env, s.loc)
        if dt != s.var.dtype:
            self.fail(s.loc, f"{s.var.name} is declared {s.var.dtype} but bound to a {dt} value")
        self.bind(s.var, env, s.loc)

    def s_Store(self, s: Store, env: _Env) -> None:
        self.access(s.buffer, s.indices, env, s.loc)
        self.expr(s.value, env, s.loc)

    def tile_op(self, s, env: _Env, rules: TileRules) -> None:
        """A tile op: each field it reads or writes (regions, buffers, expressions), then
        its table entry's shape rule."""
        d = entry(s)
        for f in (*d.reads, *d.writes):
            self.operand(getattr(s, f), env, s.loc)
        problem = rules.shape(s)
        if problem is not None:
            self.fail(s.loc, *problem)

    def operand(self, x, env: _Env, loc: Loc) -> None:
        if isinstance(x, Region):
            self.region(x, env, loc)
        elif isinstance(x, Buffer):
            self.use(x, env, loc)
        elif isinstance(x, tuple):
            for y in x:
                self.operand(y, env, loc)
        else:
            self.expr(x, env, loc)

    def s_For(self, s: For, env: _Env) -> None:
        for e, what in ((s.start, "start"), (s.stop, "stop"), (s.step, "step")):
            self.index(e, env, s.loc, f"the loop {what}")
        if not s.var.dtype.is_int:
            self.fail(s.loc, f"loop variable {s.var.name} must be an integer; got {s.var.dtype}")
        if s.num_stages < 0:
            self.fail(s.loc, f"num_stages must be >= 0; got {s.num_stages}")
        inner = env.child()
        self.bind(s.var, inner, s.loc)
        self.body(s.body, inner)

    def cond(self, e, env: _Env, loc: Loc, what: str) -> None:
        dt = self.expr(e, env, loc)
        if not dt.is_bool:
            self.fail(loc, f"{what} condition must be bool; got {dt}",
                      "compare it, e.g. `x != 0`")

    def s_If(self, s: If, env: _Env) -> None:
        self.cond(s.cond, env, s.loc, "an if")
        self.body(s.then_body, env.child())
        self.body(s.else_body, env.child())

    def s_Versioned(self, s: Versioned, env: _Env) -> None:
        self.cond(s.cond, env, s.loc, "a versioned region's")
        for a, b in s.apart:
            for x in (a, b):
                self.use(x, env, s.loc)
                if x.root.scope is not Scope.GLOBAL:
                    self.fail(s.loc, f"apart() takes global buffers; got {x.name} ({x.scope})")
        body = set(global_accesses(s.body))
        for x in s.inbounds:  # accesses of the body, verified with it
            if x not in body:
                self.fail(s.loc, f"inbounds lists {format_access(x)}, which is not a global "
                                 f"access of the versioned body",
                          "list the body's global element accesses and tile-op regions")
        self.alternatives(s, env)

    def alternatives(self, s: Versioned, env: _Env) -> None:
        """body, then fallback: only one of them runs, so a name each binds to the same
        thing (a nest the versioning pass copied) is bound once."""
        before = dict(self.names)
        self.body(s.body, env.child())
        after_body, self.names = self.names, before
        self.body(s.fallback, env.child())
        for name, thing in after_body.items():
            if self.names.get(name, thing) != thing:
                self.fail(s.loc, f"the name {name!r} is bound to different things in the two "
                                 f"versions of {display(s)}", "give each its own name")
            self.names[name] = thing

    def s_While(self, s: While, env: _Env) -> None:
        self.cond(s.cond, env, s.loc, "a while")
        self.body(s.body, env.child())

    def s_Print(self, s: Print, env: _Env) -> None:
        for a in s.args:
            if isinstance(a, Buffer):
                self.use(a, env, s.loc)
            else:
                self.expr(a, env, s.loc)

    def s_Assert(self, s: Assert, env: _Env) -> None:
        if not env.in_launch:
            self.fail(s.loc, "a run-time assert outside a T.Kernel block",
                      "asserts on run-time values go inside the T.Kernel body")
        self.cond(s.cond, env, s.loc, "an assert")

    def s_Breakpoint(self, s: Breakpoint, env: _Env) -> None:
        pass

    def s_Launch(self, s: Launch, env: _Env) -> None:
        if env.in_launch:
            self.fail(s.loc, "T.Kernel inside another T.Kernel block",
                      "launches are only allowed at the top level of the kernel")
        if not 1 <= len(s.grid) <= 3 or len(s.block_vars) != len(s.grid):
            self.fail(s.loc, f"T.Kernel needs 1 to 3 grid extents and one block variable per "
                             f"extent; got {len(s.grid)} extent(s) and {len(s.block_vars)} "
                             f"variable(s)")
        for g in s.grid:
            self.index(g, env, s.loc, "a grid extent")
        if any(not isinstance(t, int) or t <= 0 for t in s.threads):
            self.fail(s.loc, f"threads must be positive integers; got {s.threads}")
        inner = env.child(in_launch=True)
        for v in s.block_vars:
            if v.dtype != int32:
                self.fail(s.loc, f"block variable {v.name} must be int32; got {v.dtype}")
            self.bind(v, inner, s.loc)
        self.body(s.body, inner)


def _representable(c: Const) -> bool:
    """Whether a literal's value is exactly a value of its dtype (NaN counts, if the
    format has one), so that no backend has to round it."""
    dt, v = c.dtype, c.value
    if dt.is_bool:
        return True
    if dt.is_int:
        info = ml_dtypes.iinfo(dt.np_dtype)  # exact; the table's float limits round int64
        return int(info.min) <= v <= int(info.max)
    back = float(np.asarray(rounding.cast(np.asarray([v], dtype=np.float64), dt.name)[0],
                            dtype=np.float64))
    if math.isnan(v):
        return math.isnan(back)
    return back == v and math.copysign(1.0, back) == math.copysign(1.0, v)
