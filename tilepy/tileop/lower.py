"""A tile op's index expressions -> a tile-IR PrimFunc (one launch per output).

- A contraction (an output that is `sum(a[i, k] * b[k, j] ...)`, maybe inside an
  element-wise epilogue) becomes the library gemm's form: shared A and B tiles copied per
  k step of a Pipelined loop, `T.gemm` into a fragment accumulator, the epilogue in a
  `T.Parallel` over the accumulator, one copy out.
- Anything else tiles the output; each reduction is computed once per tile, at the
  outermost level its indices allow, as a serial loop over chunks of its variable: the
  chunk's values in a `T.Parallel` (masked to the identity past the end), folded with
  `T.reduce_<kind>(..., clear=False)`; then the output tile in a `T.Parallel`.
Global operands are copied tile by tile into fragments (edge tiles read 0; the copy out
drops what lies past the end). Contractions (matching and their statements) live in
contract.py. Semantics stay the op table's and the statements'.
"""

from __future__ import annotations

from collections import Counter

from tilepy.errors import NOLOC
from tilepy.frontend import exprs
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Region, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
    Copy,
    Fill,
    For,
    ForKind,
    If,
    Launch,
    Let,
    PrimFunc,
    Reduce,
    Store,
)
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import Scope, int32
from tilepy.tileop.backtoback import BackToBackLaunch, match_b2b
from tilepy.tileop.body import OpBody, Red, free_indices
from tilepy.tileop.contract import (  # noqa: F401 - match_gemm, reds_of, loads_of are API
    _ONE,
    _ZERO,
    Contractions,
    Dim,
    GemmMatch,
    _region,
    _rename,
    _tile_shape,
    is_tile_access,
    loads_of,
    match_gemm,
    reds_of,
)
from tilepy.tileop.implicit import ceildiv, emit, match_implicit


def lower(body: OpBody, tiles: dict[str, int]) -> PrimFunc:
    """The PrimFunc of a tile op with these tile sizes (by index or reduction name)."""
    sig = body.sig
    low = _Lowering(body, tiles)
    launches = tuple(low.output(k) for k in range(len(body.outs)))
    params = tuple(sig.params) + tuple(sig.outputs)
    out_idx = tuple(range(len(sig.params), len(params)))
    return PrimFunc(body.name, params, tuple(sig.sizes.values()), launches, out_idx,
                    sig.param_locs[0] if sig.param_locs else body.out_locs[0])


class _Lowering:
    def __init__(self, body: OpBody, tiles: dict[str, int]):
        self.body, self.tiles = body, tiles
        sig = body.sig
        self.names = {*sig.sizes, *(b.name for b in sig.params + sig.outputs)}

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        return name

    def tile(self, name: str) -> int:
        return self.tiles[name]

    # ------------------------------------------------------------ one output
    def output(self, k: int) -> Launch:
        out = self.body.sig.outputs[k]
        e, loc = self.body.outs[k], self.body.out_locs[k]
        names = list(self.body.index)[:len(out.shape)]
        la = _Launch(self, loc)
        la.out_expr, la.out_names = e, names
        g = match_gemm(self.body, e, names)
        m = None if g else match_implicit(self.body, e, names, reds_of(self.body, e))
        if m is not None:
            bx, by = Var(self.fresh("bx"), int32), Var(self.fresh("by"), int32)
            emit(la, m, out, names, bx, by)
            rows = ceildiv(_product(out.shape[:-1]), self.tile(names[-2]))
            grid = (ceildiv(out.shape[-1], self.tile(names[-1])), rows)
            return Launch(grid, (bx, by), (128,), tuple(la.allocs) + tuple(la.stmts),
                          loc=loc)
        grid, bvars, ctx = la.grid(out, names)
        b2b = None if g or m else match_b2b(self.body, e, names)
        if b2b is not None:
            la.back_to_back(b2b, ctx, names)
        elif g is not None:
            la.gemm(g, ctx, names)
        else:
            la.reductions(reds_of(self.body, e), None, ctx, la.stmts)
        la.store_output(out, e, ctx, names)
        body = tuple(la.allocs) + tuple(la.stmts)
        return Launch(tuple(grid), tuple(bvars), (128,), body, loc=loc)


class _Launch(Contractions, BackToBackLaunch):
    """The statements of one launch: allocations first, then the computation."""

    def __init__(self, low: _Lowering, loc):
        self.low, self.loc = low, loc
        self.body = low.body
        self.allocs: list = []
        self.stmts: list = []
        self.frags: dict = {}  # (param, indices, id(where)) -> fragment
        self.red_frags: dict = {}  # placeholder name -> (fragment, dims)
        self.chunks: dict = {}  # launch-level reduction -> (chunk fragment, dims, bk, Red)
        self.markers: dict = {}  # a reused chunk's stand-in -> (chunk fragment, dims)
        self.row_chunks: list = []  # launch-level chunks holding a tile of one operand
        self.contractions: dict = {}  # a nested contraction -> (its fragment, outer chunk)
        self.out_expr: Expr = _ZERO  # the output's expression and index names (output())
        self.out_names: list[str] = []

    def alloc(self, base: str, shape: tuple[int, ...], dt, scope=Scope.FRAGMENT) -> Buffer:
        buf = Buffer(self.low.fresh(base), tuple(Const(s, int32) for s in shape), dt, scope)
        self.allocs.append(Alloc(buf, loc=self.loc))
        return buf

    def grid(self, out: Buffer, names: list[str]):
        """Grid extents, block variables and each output index's Dim: the last two dims
        are tiled (x: columns, y: rows), leading dims are one block each (z)."""
        r = len(names)
        tiles = [1] * r
        for d in range(max(0, r - 2), r):
            tiles[d] = self.low.tile(names[d])
        bx = Var(self.low.fresh("bx"), int32)
        grid, bvars = [ceildiv(out.shape[-1], tiles[-1])], [bx]
        starts: list[Expr] = [_ZERO] * r
        starts[-1] = exprs.call(Op.MUL, [bx, tiles[-1]], self.loc)
        if r >= 2:
            by = Var(self.low.fresh("by"), int32)
            grid.append(ceildiv(out.shape[-2], tiles[-2]))
            bvars.append(by)
            starts[-2] = exprs.call(Op.MUL, [by, tiles[-2]], self.loc)
        if r >= 3:
            bz = Var(self.low.fresh("bz"), int32)
            lead: Expr = out.shape[0]
            for s in out.shape[1:r - 2]:
                lead = exprs.call(Op.MUL, [lead, s], self.loc)
            grid.append(lead)
            bvars.append(bz)
            rest: Expr = bz
            for d in range(r - 3, -1, -1):  # bz enumerates the leading dims row-major
                starts[d] = exprs.call(Op.MOD, [rest, out.shape[d]], self.loc) if d else rest
                rest = exprs.call(Op.FLOORDIV, [rest, out.shape[d]], self.loc)
        ctx = {n: Dim(starts[d], tiles[d], out.shape[d]) for d, n in enumerate(names)}
        return grid, bvars, ctx

    # ------------------------------------------------------------ contraction
    def reductions(self, reds: list[Red], home: str | None, ctx: dict, where: list) -> None:
        """Emit, into `where`, the reductions whose innermost enclosing variable is
        `home` (None: the launch level), in body order."""
        for red in reds:
            dims = self.red_dims(red, ctx)
            inner_vars = [d for d in dims if d not in self.body.index]
            if (inner_vars[-1] if inner_vars else None) == home:
                self.reduction(red, dims, reds, ctx, where)

    def red_dims(self, red: Red, ctx: dict) -> list[str]:
        used = set(free_indices(self.body, red.body)) - {red.var.name}
        order = list(ctx) + [n for r in self.body.reds for n in [r.var.name] if n not in ctx]
        return [n for n in order if n in used]

    def reduction(self, red: Red, dims: list[str], reds: list[Red], ctx: dict,
                  where: list) -> None:
        form = self.gemm_form(red, dims, ctx)
        if form is not None:
            self.gemm_reduction(red, form, reds, ctx, where)
            return
        acc = red.out.dtype
        shape = tuple(ctx[d].tile for d in dims) or (1,)
        r_frag = self.alloc("red", shape, acc)
        self.red_frags[red.out.name] = (r_frag, dims)
        ident = exprs.make_const(reduce_identity(red.kind, acc), acc, red.loc)
        where.append(Fill(full_region(r_frag), ident, loc=red.loc))
        bk = self.low.tile(red.var.name)
        ko = Var(self.low.fresh("ko"), int32)
        start = exprs.call(Op.MUL, [ko, bk], red.loc)
        inner = {**ctx, red.var.name: Dim(start, bk, red.extent)}
        loop: list = []
        self.reductions(reds, red.var.name, inner, loop)
        ld = _plain_read(red, dims)
        copied = ld is not None and is_tile_access(ld, inner)  # the chunk is a tile
        shared = self.share_chunks(red, dims, bk, inner, loop) \
            if where is self.stmts and not copied else []
        view = None if copied else self.fragment_view(red, dims, shape + (bk,), acc)
        t = view or self.overwrite(red, shared, shape + (bk,), acc) or \
            self.alloc("chunk", shape + (bk,), acc)
        if where is self.stmts:
            self.chunks[red.out.name] = (t, dims, bk, red)
        if copied:
            loop.append(Copy(_region(ld, inner), full_region(t), loc=red.loc))
            if where is self.stmts and t.dtype == ld.buffer.dtype:
                self.row_chunks.append((t, _canon(ld, red.var.name), red.extent, bk, dims))
        elif view is None:
            local = self.locals(dims + [red.var.name], inner)
            value = self.subst(red.body, local, inner, loop)
            idx = tuple([local[d] for d in dims] or [_ZERO]) + (local[red.var.name],)
            lets, value = self.common(value, red.loc)
            store = Store(t, idx, value, loc=red.loc)
            loop.extend(self.parallel(dims + [red.var.name], local, inner, lets + [store],
                                      red.loc))
        if not (isinstance(red.extent, Const) and int(red.extent.value) % bk == 0):
            loop.extend(self.mask_tail(red, t, dims, inner, start, ident))
        loop.append(Reduce(red.kind, full_region(t), full_region(r_frag), len(shape),
                           clear=False, loc=red.loc))
        where.append(For(ko, _ZERO, ceildiv(red.extent, bk), _ONE, ForKind.SERIAL,
                         tuple(loop), loc=red.loc))

    def fragment_view(self, red: Red, dims: list[str], shape: tuple, dt) -> Buffer | None:
        """When the body is a contraction computed per chunk of this reduction (the scores
        whose max attention takes), its fragment re-viewed as the chunk: no copy. The tail
        mask then writes the identity into the contraction's values past the end of the
        range, which every reader of them masks too."""
        b = red.body
        if not isinstance(b, Var) or b.name not in self.red_frags:
            return None
        frag, fdims = self.red_frags[b.name]
        mine = [(d, n) for d, n in zip(dims + [red.var.name], shape) if n > 1]
        theirs = [(d, int(n.value)) for d, n in zip(fdims, frag.shape) if int(n.value) > 1]
        if frag.dtype != dt or frag.data is not None or mine != theirs:
            return None
        view = Buffer(self.low.fresh("chunk"), tuple(Const(n, int32) for n in shape), dt,
                      frag.scope, data=frag)
        self.allocs.append(Alloc(view, loc=self.loc))
        return view

    def share_chunks(self, red: Red, dims: list[str], bk: int, inner: dict,
                     loop: list) -> list:
        """A tile this reduction reads that an earlier one copied whole as its chunk (the
        same rows, range and chunk size) is read from that chunk: when the row is one
        chunk it is already there (softmax's exp pass reads the max pass's copy of x), so
        it is copied again only for longer rows. Past the end the chunk holds the earlier
        reduction's identity instead of 0; this reduction masks those places anyway.
        Returns [(chunk, the load it stands for)]."""
        shared = []
        for ld in _tile_loads(red.body, inner):
            key = (ld.buffer.name, ld.indices, id(loop))
            for t, canon, ext, k, d in self.row_chunks:
                if key in self.frags or canon != _canon(ld, red.var.name) or \
                        ext != red.extent or k != bk or d != dims:
                    continue
                copy = Copy(_region(ld, inner), full_region(t), loc=red.loc)
                if isinstance(ext, Const) and int(ext.value) <= bk:
                    pass  # one chunk, always
                elif isinstance(ext, Const):
                    loop.append(copy)
                else:
                    loop.append(If(exprs.call(Op.GT, [ext, bk], red.loc), (copy,),
                                   loc=red.loc))
                self.frags[key] = t
                shared.append((t, ld))
        return shared

    def overwrite(self, red: Red, shared: list, shape: tuple, dt) -> Buffer | None:
        """The shared chunk this reduction's values can be computed into in place (each
        element read, then written: softmax's exponentials into the max pass's copy of x,
        as the library's one-pass kernel does), or None. Only when nothing reads the
        chunk's old values afterwards: no other reduction reads that tensor, and the
        output, once this reduction's values stand in for its body, does not read the
        earlier reduction's (whose chunk then is no longer offered for reuse)."""
        if len(shared) != 1:
            return None
        t, ld = shared[0]
        owner = next((k for k, c in self.chunks.items() if c[0] is t), None)
        if owner is None or t.dtype != dt or \
                tuple(int(x.value) for x in t.shape) != shape or \
                any(x.buffer.name == ld.buffer.name and x.indices != ld.indices
                    for x in loads_of(red.body)):
            return None
        earlier = self.chunks[owner][3]
        for r in self.body.reds:
            if r.out not in (red.out, earlier.out) and \
                    any(x.buffer.name == ld.buffer.name for x in loads_of(r.body)):
                return None
        out = self.out_expr
        for j in self.out_names:
            mine = _rename(red.body, red.var.name, self.body.index[j])
            if isinstance(mine, (Call, Load)):
                out = _replace(out, mine, Var("__mine", mine.dtype))
        for j in self.out_names:
            if _contains(out, _rename(earlier.body, earlier.var.name, self.body.index[j])):
                return None
        del self.chunks[owner]
        self.row_chunks = [c for c in self.row_chunks if c[0] is not t]
        return t

    def mask_tail(self, red: Red, t: Buffer, dims: list[str], inner: dict, start: Expr,
                  ident: Const) -> list:
        """The identity past the end of the range, in a pass of its own (as the library
        kernels mask: it keeps the values' loop free of selects)."""
        local = self.locals(dims + [red.var.name], inner)
        idx = tuple([local[d] for d in dims] or [_ZERO]) + (local[red.var.name],)
        # `k_t >= extent - start`: a loop variable against an invariant, which the JIT
        # turns into the loop's lower bound (no test per element)
        rest = exprs.call(Op.SUB, [red.extent, start], red.loc)
        past = exprs.call(Op.GE, [local[red.var.name], rest], red.loc)
        mask = If(past, (Store(t, idx, ident, loc=red.loc),), loc=red.loc)
        return self.parallel(dims + [red.var.name], local, inner, [mask], red.loc)

    # ------------------------------------------------------------ element-wise
    def store_output(self, out: Buffer, e: Expr, ctx: dict, names: list[str]) -> None:
        r_frag = self.red_frags.get(e.name) if isinstance(e, Var) else None
        tiles = tuple(ctx[n].tile for n in names)
        region = Region(out, tuple(ctx[n].start for n in names),
                        tuple(Const(t, int32) for t in tiles))
        if r_frag is not None and r_frag[1] == names:  # the copy rounds as a store would
            self.stmts.append(Copy(full_region(r_frag[0]), region, loc=self.loc))
            return
        reused, conds = self.reusable(e, names, ctx)
        o_frag = self.in_place(reused, names, tiles, out.dtype) if reused else None
        o_frag = o_frag or self.alloc(out.name + "_tile", tiles, out.dtype)
        if not reused:
            self.store_tile(o_frag, e, names, ctx, self.stmts)
        else:  # a row that is one chunk: read the chunks' values instead of recomputing
            then: list = []
            self.store_tile(o_frag, reused, names, ctx, then)
            if not conds:
                self.stmts.extend(then)
            else:
                other: list = []
                self.store_tile(o_frag, e, names, ctx, other)
                cond = conds[0]
                for c in conds[1:]:
                    cond = exprs.call(Op.AND, [cond, c], self.loc)
                self.stmts.append(If(cond, tuple(then), tuple(other), loc=self.loc))
        self.stmts.append(Copy(full_region(o_frag), region, loc=self.loc))

    def in_place(self, e: Expr, names: list[str], tiles: tuple, dt) -> Buffer | None:
        """A chunk that e reads at the output's own indices, of the output tile's shape and
        dtype: the output tile is computed into it (each element read, then written)."""
        for v in _vars(e):
            t, dims = self.markers.get(v, (None, None))
            if t is not None and dims == names and t.dtype == dt and \
                    tuple(int(x.value) for x in t.shape) == tiles:
                return t
        return None

    def store_tile(self, o_frag: Buffer, e: Expr, names: list[str], ctx: dict,
                   where: list) -> None:
        local = self.locals(names, ctx)
        value = self.subst(e, local, ctx, where)
        lets, value = self.common(value, self.loc)
        store = Store(o_frag, tuple(local[n] for n in names), value, loc=self.loc)
        where.extend(self.parallel(names, local, ctx, lets + [store], self.loc))

    def reusable(self, e: Expr, names: list[str], ctx: dict):
        """e with each reduction body that it recomputes at a column index j (the body
        with the reduction's variable renamed j) replaced by a read of that reduction's
        chunk, and the run-time conditions under which the chunk holds those values (the
        reduction ran one chunk that is this column tile): (None, []) if nothing reuses."""
        out, conds = e, []
        biggest_first = sorted(self.chunks.values(), key=lambda c: -_size(c[3].body))
        for t, dims, bk, red in biggest_first:
            for j in names:
                if j in dims or not set(dims) <= set(names) or ctx[j].tile != bk or \
                        ctx[j].extent != red.extent:
                    continue
                s = _rename(red.body, red.var.name, self.body.index[j])
                if not isinstance(s, (Call, Load)) or not _contains(out, s):
                    continue
                marker = Var(self.low.fresh("__c"), s.dtype)
                self.markers[marker.name] = (t, dims + [j])
                out = _replace(out, s, marker)
                if not (isinstance(red.extent, Const) and int(red.extent.value) <= bk):
                    conds.append(exprs.call(Op.LE, [red.extent, bk], self.loc))
                break
        return (out, conds) if out is not e else (None, [])

    def locals(self, names: list[str], ctx: dict) -> dict[str, Expr]:
        """A loop variable per index of tile size > 1; the constant 0 for the others."""
        return {n: Var(self.low.fresh(n.split("_")[0] + "_t"), int32) if ctx[n].tile > 1
                else _ZERO for n in names}

    def parallel(self, names: list[str], local: dict, ctx: dict, body: list, loc):
        stmts = tuple(body)
        for n in reversed(names):
            v = local[n]
            if isinstance(v, Var):
                stmts = (For(v, _ZERO, Const(ctx[n].tile, int32), _ONE, ForKind.PARALLEL,
                             stmts, loc=loc),)
        return list(stmts)

    def common(self, value: Expr, loc) -> tuple[list, Expr]:
        """Bind each subexpression that occurs more than once (a local name the body used
        several times) to a `Let`, innermost first: the same operations on the same values,
        computed once."""
        lets: list = []
        while True:
            counts = Counter(_calls(value))
            repeated = [c for c, n in counts.items() if n > 1]
            if not repeated:
                return lets, value
            c = min(repeated, key=lambda x: sum(1 for _ in _calls(x)))
            v = Var(self.low.fresh("v"), c.dtype)
            lets.append(Let(v, c, loc=loc))
            value = _replace(value, c, v)

    def subst(self, e: Expr, local: dict, ctx: dict, where: list) -> Expr:
        """e inside a loop nest: indices are tile start + loop variable, operands load
        from fragments (copied into `where` the first time), reductions from theirs."""
        if isinstance(e, Var):
            if e.name in self.markers or e.name in self.red_frags:
                frag, dims = self.markers.get(e.name) or self.red_frags[e.name]
                return Load(frag, tuple(local[d] for d in dims) or (_ZERO,))
            if e.name in ctx:
                return exprs.call(Op.ADD, [ctx[e.name].start, local[e.name]], self.loc) \
                    if isinstance(local[e.name], Var) else ctx[e.name].start
            return e
        if isinstance(e, Load) and is_tile_access(e, ctx):
            frag = self.fragment(e, ctx, where)
            return Load(frag, tuple(local[x.name] if isinstance(x, Var) else _ZERO
                                    for x in e.indices))
        if isinstance(e, Load):  # an element of the global tensor, 0 outside it
            idx = tuple(self.subst(x, local, ctx, where) for x in e.indices)
            inside = None
            for i, size in zip(idx, e.buffer.shape):
                c = exprs.call(Op.AND, [exprs.call(Op.GE, [i, 0], self.loc),
                                        exprs.call(Op.LT, [i, size], self.loc)], self.loc)
                inside = c if inside is None else exprs.call(Op.AND, [inside, c], self.loc)
            zero = exprs.make_const(0, e.buffer.dtype, self.loc)
            return exprs.call(Op.SELECT, [inside, Load(e.buffer, idx), zero], self.loc)
        if isinstance(e, Call):
            return Call(e.op, tuple(self.subst(a, local, ctx, where) for a in e.args),
                        e.dtype, e.loc)
        return e

    def fragment(self, ld: Load, ctx: dict, where: list) -> Buffer:
        key = (ld.buffer.name, ld.indices, id(where))
        if key not in self.frags:
            frag = self.alloc(ld.buffer.name + "_tile", _tile_shape(ld, ctx), ld.buffer.dtype)
            where.append(Copy(_region(ld, ctx), full_region(frag), loc=self.loc))
            self.frags[key] = frag
        return self.frags[key]


def _product(xs) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = exprs.call(Op.MUL, [out, x], NOLOC)
    return out


def _calls(e: Expr):
    if isinstance(e, Call):
        yield e
        for a in e.args:
            yield from _calls(a)
    elif isinstance(e, Load):
        for x in e.indices:
            yield from _calls(x)


def _replace(e: Expr, old: Expr, new: Var) -> Expr:
    if e == old:
        return new
    if isinstance(e, Call):
        return Call(e.op, tuple(_replace(a, old, new) for a in e.args), e.dtype, e.loc)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_replace(x, old, new) for x in e.indices))
    return e


def _size(e: Expr) -> int:
    if isinstance(e, Call):
        return 1 + sum(_size(a) for a in e.args)
    return 1


def _contains(e: Expr, sub: Expr) -> bool:
    return e == sub or isinstance(e, Call) and any(_contains(a, sub) for a in e.args)


def _plain_read(red: Red, dims: list[str]) -> Load | None:
    """The access when a reduction's body only reads (and converts) one element at
    exactly (dims..., var): the copy converts as the cast would."""
    b = red.body
    if isinstance(b, Call) and b.op is Op.CAST and isinstance(b.args[0], Load):
        b = b.args[0]
    names = [x.name if isinstance(x, Var) else None for x in getattr(b, "indices", ())]
    return b if isinstance(b, Load) and dims and names == dims + [red.var.name] else None


def _vars(e: Expr) -> list[str]:
    if isinstance(e, Var):
        return [e.name]
    if isinstance(e, Call):
        return [n for a in e.args for n in _vars(a)]
    return []


def _canon(ld: Load, var: str) -> tuple:
    """A load's buffer and indices, the reduction variable written as one placeholder."""
    return (ld.buffer.name,) + tuple("__k" if isinstance(x, Var) and x.name == var else x
                                     for x in ld.indices)


def _tile_loads(e: Expr, names) -> list[Load]:
    return [ld for ld in loads_of(e) if is_tile_access(ld, names)]

