"""Loop fission at barriers (the MCUDA / POCL approach): a thread-level launch body becomes
ordinary tile IR. The per-thread code turns into serial loops over the thread ids, split at
each barrier and collective, so threads run in a fixed order (thread 0, 1, ... n-1, each in
program order) between barriers. Per-thread storage (`T.alloc_local`, `T.alloc_var`, and
names that live across a split) gains a leading thread dimension. Loops and ifs that hold a
barrier stay outside the thread loops, which needs their bounds and conditions to be the
same for every thread; otherwise the barrier is an error at its line.
"""

from __future__ import annotations

import dataclasses
import math

from tilepy.errors import NOLOC, Loc, TileSyntaxError
from tilepy.frontend import exprs, fetchadd, phases, syncplan, votes
from tilepy.frontend.simt import WARP, AllReduce, Barrier, Shuffle, Vote
from tilepy.frontend.uniform import uniform_buffers
from tilepy.frontend.walk import BODIES, children, deep, map_expr, stmt_exprs, sub_exprs
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Load, Region, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import Scope, bool_, int32, int64

_SPLITS = (Barrier, Shuffle, AllReduce, Vote)


def fission(tr, body: tuple, threads: tuple[int, ...], tvars: tuple[Var, ...],
            loc: Loc) -> tuple:
    """The launch body `body` (with thread variables `tvars` and markers) as tile IR."""
    return Fission(tr, threads, tvars).run(body)


class Fission:
    """One launch's fission; `tr` gives fresh names and the source for messages."""

    def __init__(self, tr, threads: tuple[int, ...], tvars: tuple[Var, ...]):
        self.tr = tr
        self.shape = tuple(threads) + (1,) * (3 - len(threads))
        self.n = math.prod(self.shape)
        self.tvars = tvars
        self.lin = Var(tr.unique("tid"), int32)  # the linear thread id, in markers' code
        self.dep: set[Var] = set(tvars) | {self.lin}
        self.per_thread: dict[str, Buffer] = {}  # local/var buffer name -> with thread dim
        self.let_bufs: dict[Var, Buffer] = {}  # per-thread names kept across splits
        self.inline: dict[Var, object] = {}  # per-thread names recomputed in each phase
        self.allocs: list[S.Alloc] = []
        self.guards: list = []  # conditions of the thread-dependent ifs being split
        self.uniform: set[str] = set()  # per-thread buffers equal in every thread
        self.phase_vars: set[Var] = set()  # names bound inside thread loops

    # ------------------------------------------------------------ driver
    def run(self, body: tuple) -> tuple:
        body = self.hoist(body)
        uniform_buffers(body, self)
        body = syncplan.plan(body, self)
        out = self.process(body)
        return tuple(self.allocs) + tuple(out)

    def hoist(self, body: tuple) -> tuple:
        """Moves every allocation to the launch's top; local and var buffers get a leading
        thread dimension (one slot per thread)."""
        out = []
        for s in body:
            if isinstance(s, S.Alloc):
                b = s.buffer
                if b.scope in (Scope.LOCAL, Scope.VAR) and b.data is None:
                    nb = Buffer(b.name, (Const(self.n, int32),) + b.shape, b.dtype,
                                Scope.LOCAL)
                    self.per_thread[b.name] = nb
                    b = nb
                self.allocs.append(S.Alloc(b, loc=s.loc))
                continue
            fields = BODIES.get(type(s), ())
            if fields:
                s = dataclasses.replace(s, **{n: self.hoist(getattr(s, n)) for n in fields})
            out.append(s)
        return tuple(out)

    # ------------------------------------------------------------ classification
    def is_dep(self, e) -> bool:
        """Whether expression e may differ between threads (thread ids, per-thread
        storage, names bound from them)."""
        for x in sub_exprs(e):
            if isinstance(x, Var) and x in self.dep:
                return True
            if isinstance(x, Load) and x.buffer.name in self.per_thread and \
                    x.buffer.name not in self.uniform:
                return True
        return False

    def pure(self, e) -> bool:
        """Thread-independent, reading no memory and naming no name bound inside a thread
        loop: safe to evaluate once, outside the thread loops."""
        return not self.is_dep(e) and not any(
            isinstance(x, Load) or isinstance(x, Var) and x in self.phase_vars
            for x in sub_exprs(e))

    def recomputable(self, e) -> bool:
        """Reads no memory and names only thread ids, names bound outside the thread loops
        and other recomputable names: each phase can compute it again."""
        for x in sub_exprs(e):
            if isinstance(x, Load) or isinstance(x, Var) and x in self.let_bufs:
                return False
        return True

    def is_block_op(self, s) -> bool:
        """A tile op or T.Parallel nest on per-block data that uses no thread id: the block
        runs it once, between the threads' phases (as cooperative tile ops do)."""
        tile = isinstance(s, S.TILE_OPS) or (isinstance(s, S.For)
                                             and s.kind is S.ForKind.PARALLEL)
        if not tile or isinstance(s, S.AtomicAdd) and not isinstance(s.value, Region):
            return False  # an element atomic add is each thread's own
        for t in deep((s,)):
            if isinstance(t, _SPLITS) or any(self.is_dep(e) for e in stmt_exprs(t)):
                return False
            if any(b.name in self.per_thread for b in _buffers(t)):
                return False
        return True

    def control(self, s):
        """The expression that decides whether (or how often) s's body runs."""
        if isinstance(s, S.For):
            return (s.start, s.stop, s.step)
        return (s.cond,)

    def has_split(self, s) -> bool:
        if isinstance(s, _SPLITS) or self.is_block_op(s):
            return True
        if not children(s):
            return False
        if any(self.is_dep(e) for e in self.control(s)):
            return any(isinstance(t, _SPLITS) for b in children(s) for t in deep(b))
        return any(self.has_split(t) for b in children(s) for t in b)

    def check_uniform(self, s) -> bool:
        """True when s's control is the same for every thread; False for an `if` on the
        thread that holds only partial barriers (`T.sync_threads(id, count)`: a barrier
        of the threads that take the branch), whose condition each phase can recompute.
        Otherwise a barrier or collective inside is an error at its line."""
        if not any(self.is_dep(e) for e in self.control(s)):
            return True
        inner = [t for b in children(s) for t in deep(b) if isinstance(t, _SPLITS)]
        if isinstance(s, S.If) and self.recomputable(s.cond) and all(
                isinstance(t, Barrier) and t.partial for t in inner):
            return False
        what = {S.For: "the loop", S.While: "the while loop", S.If: "the if"}[type(s)]
        part = "bounds depend" if isinstance(s, S.For) else "condition depends"
        raise TileSyntaxError(
            f"{inner[0].what} is inside {what} at line {s.loc.line}, whose {part} on the "
            "thread: every thread of the block must reach a barrier or warp collective "
            "together (in CUDA a divergent one is undefined)", inner[0].loc,
            hint="move it out of that loop or branch, or make the bounds/condition the same "
                 "for every thread (not using the thread index, T.alloc_local or T.alloc_var "
                 "values)")

    # ------------------------------------------------------------ splitting
    def process(self, body) -> list:
        out: list = []
        cur: list = []
        for s in body:
            if isinstance(s, Barrier):
                cur = self.flush(out, cur)
            elif isinstance(s, (Shuffle, AllReduce, Vote)):
                cur = self.flush(out, cur + self.before(s)) + self.after(s)
            elif isinstance(s, S.Let) and self.pure(s.value):
                out.append(s)  # the same for every thread: bound once, outside
            elif isinstance(s, S.Let):
                if self.is_dep(s.value):
                    self.dep.add(s.var)
                self.phase_vars.add(s.var)
                cur.append(s)
            elif self.is_block_op(s):
                cur = self.flush(out, cur)
                # names it uses from the threads' phases are the same in every thread
                out.append(self.rewrite(s, Const(0, int32)))
            elif children(s) and self.has_split(s):
                uniform = self.check_uniform(s)
                cur = self.flush(out, cur)
                if uniform:
                    parts = {n: tuple(self.process(getattr(s, n))) for n in BODIES[type(s)]}
                    out.append(self.outside(dataclasses.replace(s, **parts)))
                else:  # each phase of each branch runs where its thread's condition holds
                    out += self.guarded(s.then_body, s.cond)
                    out += self.guarded(s.else_body, exprs.call(Op.NOT, [s.cond], s.loc))
            else:
                cur.append(s)
        self.flush(out, cur, final=True)
        return out

    def outside(self, s):
        """s (a loop or branch kept outside the thread loops) with its bounds or condition
        reading thread 0's copy of the uniform per-thread values they name."""
        t0 = Const(0, int32)
        keep = {n: getattr(s, n) for n in BODIES[type(s)]}
        bare = dataclasses.replace(s, **{n: () for n in keep})
        return dataclasses.replace(self.rewrite(bare, t0), **keep)

    def guarded(self, body, cond) -> list:
        self.guards.append(cond)
        try:
            return self.process(body) if body else []
        finally:
            self.guards.pop()

    def flush(self, out: list, cur: list, final: bool = False) -> list:
        """Emits cur as one thread loop; before a split, its names become per-thread
        storage (later phases read them from there). Returns a new, empty phase."""
        if not final:
            for s in cur:
                if isinstance(s, S.Let) and self.recomputable(s.value):
                    self.inline[s.var] = s.value
                elif isinstance(s, S.Let) and s.var not in self.let_bufs:
                    buf = Buffer(self.tr.unique(s.var.name + "_t"), (Const(self.n, int32),),
                                 s.var.dtype, Scope.LOCAL)
                    self.allocs.append(S.Alloc(buf, loc=s.loc))
                    self.let_bufs[s.var] = buf
        cur = [s for s in cur if not (isinstance(s, S.Let) and s.var in self.inline)]
        if cur and self.guards:
            guard = self.guards[0]
            for g in self.guards[1:]:
                guard = exprs.call(Op.AND, [guard, g], g.loc)
            cur = [S.If(guard, tuple(cur), loc=cur[0].loc)]
        if cur:
            t = Var(self.tr.unique("t"), int32)
            body = tuple(self.rewrite(s, t) for s in cur)
            par = self.parallel_body(body, t)
            kind = S.ForKind.SERIAL if par is None else S.ForKind.PARALLEL
            body = body if par is None else par
            out.append(S.For(t, Const(0, int32), Const(self.n, int32), Const(1, int32),
                             kind, body, loc=cur[0].loc))
        return []

    def parallel_body(self, body, t: Var):
        """The phase as a T.Parallel loop's body when no thread can see another's work
        (the interpreter then runs its threads as one vector step; frontend/phases.py says
        when), else None."""
        own = {b.name for b in self.per_thread.values()} | {
            b.name for b in self.let_bufs.values()}
        made: list[Buffer] = []

        def new_buf(dtype) -> Buffer:  # a fetch-and-add's old value, one per thread
            made.append(Buffer(self.tr.unique("old_t"), (Const(self.n, int32),), dtype,
                               Scope.LOCAL))
            return made[-1]
        fetched = fetchadd.rewrite(body, t, own, new_buf)
        par = phases.parallel_body(fetched, t, self.n, own | {b.name for b in made},
                                   self.uniform)
        if par is not None:
            self.allocs += [S.Alloc(b) for b in made]
        return par

    # ------------------------------------------------------------ per-thread rewrite
    def thread_exprs(self, t: Var) -> dict:
        nx, ny, nz = self.shape
        loc = NOLOC
        one_dim = ny == 1 and nz == 1
        m = {self.lin: t}
        zero = Const(0, int32)
        m[self.tvars[0]] = t if one_dim else exprs.call(Op.MOD, [t, nx], loc)
        m[self.tvars[1]] = zero if ny == 1 else exprs.call(
            Op.MOD, [exprs.call(Op.FLOORDIV, [t, nx], loc), ny], loc)
        m[self.tvars[2]] = zero if nz == 1 else exprs.call(Op.FLOORDIV, [t, nx * ny], loc)
        return m

    def rewrite(self, s, t: Var):
        m = self.thread_exprs(t)

        def f(e):
            if isinstance(e, Var):
                if e in m:
                    return m[e]
                if e in self.let_bufs:
                    return Load(self.let_bufs[e], (t,))
                if e in self.inline:
                    return map_expr(self.inline[e], f)
            if isinstance(e, Load) and e.buffer.name in self.per_thread:
                return Load(self.per_thread[e.buffer.name], (t,) + e.indices)
            return e
        return self._stmt(s, t, f)

    def _stmt(self, s, t: Var, f):
        if isinstance(s, S.Fill) and s.dst.buffer.name in self.per_thread:
            return self._own_fill(s, t, f)
        if isinstance(s, S.Let) and s.var in self.let_bufs:
            return S.Store(self.let_bufs[s.var], (t,), map_expr(s.value, f), loc=s.loc)
        if isinstance(s, S.Store) and s.buffer.name in self.per_thread:
            idx = tuple(map_expr(i, f) for i in s.indices)
            return S.Store(self.per_thread[s.buffer.name], (t,) + idx,
                           map_expr(s.value, f), loc=s.loc)
        changes = {}
        for fd in dataclasses.fields(s):
            v = getattr(s, fd.name)
            if fd.name in BODIES.get(type(s), ()):
                changes[fd.name] = tuple(self._stmt(x, t, f) for x in v)
            else:
                changes[fd.name] = self._value(v, t, f)
        return dataclasses.replace(s, **changes)

    def _own_fill(self, s: S.Fill, t: Var, f):
        """`T.fill` / `T.clear` of a thread's own storage, as stores (a store rounds as a
        fill does), so that the phase can still run as T.Parallel."""
        r = self._value(s.dst, t, f)
        if not all(isinstance(e, Const) for e in r.extents):
            return dataclasses.replace(s, dst=r, value=map_expr(s.value, f))
        loops = [(Var(self.tr.unique("j"), int32), int(e.value)) for e in r.extents[1:]]
        idx = (r.starts[0],) + tuple(
            st if n == 1 else exprs.call(Op.ADD, [st, j], s.loc)
            for st, (j, n) in zip(r.starts[1:], loops))
        out = S.Store(r.buffer, idx, map_expr(s.value, f), loc=s.loc)
        for j, n in reversed(loops):
            if n != 1:
                out = S.For(j, Const(0, int32), Const(n, int32), Const(1, int32),
                            S.ForKind.SERIAL, (out,), loc=s.loc)
        return out

    def _value(self, v, t: Var, f):
        if exprs.is_ir(v):
            return map_expr(v, f)
        if isinstance(v, Region):
            starts = tuple(map_expr(x, f) for x in v.starts)
            extents = tuple(map_expr(x, f) for x in v.extents)
            pb = self.per_thread.get(v.buffer.name)
            if pb is not None:
                return Region(pb, (t,) + starts, (Const(1, int32),) + extents)
            return Region(v.buffer, starts, extents)
        if isinstance(v, tuple):
            return tuple(self._value(x, t, f) for x in v)
        return v

    # ------------------------------------------------------------ collectives
    def exchange(self, base: str, dtype) -> Buffer:
        buf = Buffer(self.tr.unique(base), (Const(self.n, int32),), dtype, Scope.SHARED)
        self.allocs.append(S.Alloc(buf))
        return buf

    def before(self, s) -> list:
        """The statements each thread runs before the collective: its operands, stored
        where every thread can read them after the split."""
        if isinstance(s, Vote):
            return self.vote_operands(s)
        vals = self.exchange("xchg", s.value.dtype)
        out = [S.Store(vals, (self.lin,), s.value, loc=s.loc)]
        self._vals = vals
        if isinstance(s, Shuffle):
            self._lanes = self.exchange("xlane", int32)
            out.append(S.Store(self._lanes, (self.lin,), s.lane, loc=s.loc))
        return out

    def after(self, s) -> list:
        if isinstance(s, Vote):
            return votes.lower(self, s, self._vals, self._masks)
        if isinstance(s, Shuffle):
            return self.shuffle(s, self._vals, self._lanes)
        return self.allreduce(s, self._vals)

    def vote_operands(self, s: Vote) -> list:
        self._vals = self.exchange("xpred", int32)
        out = [S.Store(self._vals, (self.lin,), exprs.cast(s.pred, int32, s.loc), loc=s.loc)]
        self._masks = None
        if s.mask is not None:
            self._masks = self.exchange("xmask", int64)
            out.append(S.Store(self._masks, (self.lin,), s.mask, loc=s.loc))
        return out

    def shuffle(self, s: Shuffle, vals: Buffer, lanes: Buffer) -> list:
        """result = vals[source lane] (CUDA's __shfl_*_sync, width-lane groups); a source
        outside the group or the block gives the thread its own value."""
        c, loc = (lambda op, *a: exprs.call(op, list(a), s.loc)), s.loc
        lin, d, wm = self.lin, Load(lanes, (self.lin,)), s.width - 1
        lane = c(Op.BITAND, lin, WARP - 1)
        group = c(Op.SUB, lane, c(Op.BITAND, lane, wm))
        true = Const(True, bool_)
        if s.kind == "idx":
            src, ok = c(Op.ADD, group, c(Op.BITAND, d, wm)), true
        elif s.kind == "xor":
            src = c(Op.BITXOR, lane, d)
            ok = c(Op.AND, c(Op.LE, c(Op.SUB, src, c(Op.BITAND, src, wm)), group),
                   c(Op.AND, c(Op.GE, src, 0), c(Op.LT, src, WARP)))
        elif s.kind == "down":
            src = c(Op.ADD, lane, d)
            ok = c(Op.LE, c(Op.ADD, c(Op.BITAND, lane, wm), d), wm)
        else:
            src = c(Op.SUB, lane, d)
            ok = c(Op.GE, c(Op.BITAND, lane, wm), d)
        at = c(Op.ADD, c(Op.SUB, lin, lane), src)
        ok = c(Op.AND, ok, c(Op.AND, c(Op.GE, at, 0), c(Op.LT, at, self.n)))
        at = c(Op.SELECT, ok, at, lin)
        return [S.Store(s.result, (), Load(vals, (at,)), loc=loc)]

    def allreduce(self, s: AllReduce, vals: Buffer) -> list:
        """dest = combine folded over the peers' values, ascending thread id, starting
        from the first peer's value."""
        c, loc = (lambda op, *a: exprs.call(op, list(a), s.loc)), s.loc
        strides = (1, self.shape[0], self.shape[0] * self.shape[1])
        def scaled(x, m):
            return x if m == 1 else c(Op.MUL, x, m)
        base = self.lin
        for d in s.dims:
            base = c(Op.SUB, base, scaled(self.tvars[d], strides[d]))
        npeers = math.prod(self.shape[d] for d in s.dims)
        k = Var(self.tr.unique("k"), int32)
        peer, rest, left = base, k, npeers
        for d in s.dims:
            left //= self.shape[d]
            digit = rest if left == 1 else c(Op.MOD, rest, self.shape[d])
            peer = c(Op.ADD, peer, scaled(digit, strides[d]))
            rest = c(Op.FLOORDIV, rest, self.shape[d])
        acc = self.exchange("acc", s.value.dtype)
        first = base
        fold = S.Store(acc, (self.lin,), s.combine(Load(acc, (self.lin,)),
                                                  Load(vals, (peer,))), loc=loc)
        return [S.Store(acc, (self.lin,), Load(vals, (first,)), loc=loc),
                S.For(k, Const(1, int32), Const(npeers, int32), Const(1, int32),
                      S.ForKind.SERIAL, (fold,), loc=loc),
                S.Store(s.dest, s.indices, Load(acc, (self.lin,)), loc=loc)]


def _buffers(s):
    """The buffers statement s names itself: loads, stores, regions."""
    for e in stmt_exprs(s):
        for x in sub_exprs(e):
            if isinstance(x, Load):
                yield x.buffer
    for fd in dataclasses.fields(s):
        v = getattr(s, fd.name)
        if isinstance(v, Buffer):
            yield v
        elif isinstance(v, Region):
            yield v.buffer
