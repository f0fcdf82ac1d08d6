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
drops what lies past the end). Semantics stay the op table's and the statements'.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

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
    Gemm,
    If,
    Launch,
    Let,
    PrimFunc,
    Reduce,
    Store,
)
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import Scope, int32
from tilepy.tileop.body import OpBody, Red, free_indices
from tilepy.tileop.implicit import ceildiv, emit, match_implicit

_ZERO, _ONE = Const(0, int32), Const(1, int32)


@dataclass(frozen=True)
class Dim:
    """An index inside a launch: the tile's first global index, its size, the extent."""

    start: Expr
    tile: int
    extent: Expr


@dataclass(frozen=True)
class GemmMatch:
    red: Red
    a: Load
    b: Load
    trans_a: bool
    trans_b: bool


def lower(body: OpBody, tiles: dict[str, int]) -> PrimFunc:
    """The PrimFunc of a tile op with these tile sizes (by index or reduction name)."""
    sig = body.sig
    low = _Lowering(body, tiles)
    launches = tuple(low.output(k) for k in range(len(body.outs)))
    params = tuple(sig.params) + tuple(sig.outputs)
    out_idx = tuple(range(len(sig.params), len(params)))
    return PrimFunc(body.name, params, tuple(sig.sizes.values()), launches, out_idx,
                    sig.param_locs[0] if sig.param_locs else body.out_locs[0])


def reds_of(body: OpBody, e: Expr) -> list[Red]:
    """The reductions e needs, directly or through other reductions, in body order."""
    found: set = set()

    def visit(x: Expr) -> None:
        if isinstance(x, Var):
            red = body.red(x)
            if red is not None and red.out not in found:
                found.add(red.out)
                visit(red.body)
        elif isinstance(x, Load):
            for ix in x.indices:
                visit(ix)
        elif isinstance(x, Call):
            for a in x.args:
                visit(a)

    visit(e)
    return [r for r in body.reds if r.out in found]


def loads_of(e: Expr) -> list[Load]:
    if isinstance(e, Load):
        return [e]
    if isinstance(e, Call):
        return [ld for a in e.args for ld in loads_of(a)]
    return []


def match_gemm(body: OpBody, e: Expr, names: list[str]) -> GemmMatch | None:
    """A rank-2 output whose only reduction is a sum of products of two 2-d operands
    indexed (i, k) / (k, j), either transposed: T.gemm's contraction."""
    reds = reds_of(body, e)
    if len(names) != 2 or len(reds) != 1 or reds[0].kind.value != "sum":
        return None
    red = reds[0]
    b = red.body
    if not (isinstance(b, Call) and b.op is Op.MUL):
        return None
    i, j, k = names[0], names[1], red.var.name
    ops = [_operand(x, red.out.dtype, body) for x in b.args]
    if None in ops:
        return None

    def idx(x: Expr) -> list[str]:
        if isinstance(x, Load):
            return [v.name if isinstance(v, Var) else "" for v in x.indices]
        return sorted({v.name for ld in loads_of(x) for v in ld.indices})

    x, y = ops
    if set(idx(x)) <= {k, j} and set(idx(y)) <= {i, k} and not \
            (set(idx(x)) <= {i, k} and set(idx(y)) <= {k, j}):
        x, y = y, x  # a * b == b * a, bit for bit
    if isinstance(x, Load) and (set(idx(x)) != {i, k} or len(idx(x)) != 2) or \
            isinstance(y, Load) and (set(idx(y)) != {k, j} or len(idx(y)) != 2) or \
            not set(idx(x)) <= {i, k} or not set(idx(y)) <= {k, j}:
        return None
    return GemmMatch(red, x, y, isinstance(x, Load) and idx(x)[0] == k,
                     isinstance(y, Load) and idx(y)[0] == j)


def _operand(x: Expr, acc, body: OpBody) -> Expr | None:
    """A tile load, a widening cast of one (T.gemm converts operands to C's dtype), or an
    element-wise prologue: an expression of tile loads (computed into the operand's tile)."""
    if isinstance(x, Call) and x.op is Op.CAST and len(x.args) == 1:
        inner = x.args[0]
        same_kind = inner.dtype.is_float == acc.is_float and inner.dtype.bits <= acc.bits
        if isinstance(inner, Load) and same_kind and x.dtype == acc:
            x = inner
    if isinstance(x, Load):
        return x if is_tile_access(x, body.extents) else None
    lds = loads_of(x)
    if not lds or not all(is_tile_access(ld, body.extents) for ld in lds) or \
            _has_var(x, {r.out.name for r in body.reds}) or not _only_calls(x):
        return None
    return x


def _unwrap_acc(f: Expr, acc) -> Expr | None:
    """A factor as T.gemm sees it (a widening cast to the accumulator is the gemm's own
    conversion); None for a factor of another dtype."""
    if isinstance(f, Call) and f.op is Op.CAST and len(f.args) == 1 and f.dtype == acc:
        inner = f.args[0]
        if inner.dtype.is_float == acc.is_float and inner.dtype.bits <= acc.bits:
            return inner
    return f if f.dtype == acc else None


def _has_var(e: Expr, names: set) -> bool:
    if isinstance(e, Var):
        return e.name in names
    if isinstance(e, Load):
        return any(_has_var(x, names) for x in e.indices)
    return isinstance(e, Call) and any(_has_var(a, names) for a in e.args)


def _only_calls(e: Expr) -> bool:
    """Loads, constants and op calls only (no index used as a value)."""
    if isinstance(e, Call):
        return all(_only_calls(a) for a in e.args)
    return not isinstance(e, Var)


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
        if g is not None:
            la.gemm(g, ctx, names)
        else:
            la.reductions(reds_of(self.body, e), None, ctx, la.stmts)
        la.store_output(out, e, ctx, names)
        body = tuple(la.allocs) + tuple(la.stmts)
        return Launch(tuple(grid), tuple(bvars), (128,), body, loc=loc)


class _Launch:
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
    def gemm(self, g: GemmMatch, ctx: dict, names: list[str]) -> None:
        i, j, k = names[0], names[1], g.red.var.name
        bm, bn, bk = ctx[i].tile, ctx[j].tile, self.low.tile(k)
        ko = Var(self.low.fresh("ko"), int32)
        inner = {**ctx, k: Dim(exprs.call(Op.MUL, [ko, bk], self.loc), bk, g.red.extent)}
        steps: list = []
        a_s = self.operand(g.a, [i, k], inner, steps, g.red)
        b_s = self.operand(g.b, [k, j], inner, steps, g.red)
        acc = self.alloc("acc", (bm, bn), g.red.out.dtype)
        self.stmts.append(Fill(full_region(acc), Const(0, acc.dtype), loc=g.red.loc))
        steps.append(Gemm(full_region(a_s), full_region(b_s), full_region(acc), g.trans_a,
                          g.trans_b, loc=g.red.loc))
        self.stmts.append(For(ko, _ZERO, ceildiv(g.red.extent, bk), _ONE, ForKind.PIPELINED,
                              tuple(steps), num_stages=2, loc=g.red.loc))
        self.red_frags[g.red.out.name] = (acc, [i, j])

    def operand(self, x: Expr, dims: list[str], inner: dict, steps: list, red: Red,
                always: bool = False) -> Buffer:
        """A shared tile of a gemm operand, filled per k step: a tile copy of a load, or
        computed from its loads' fragments (0 past the end of k, as a copy reads); inside a
        row kernel, read from an earlier reduction's chunk holding the same values when
        the row is one chunk (attention's probabilities, computed for their sum)."""
        if isinstance(x, Load) and not always:
            buf = self.alloc(x.buffer.name + "_shared", _tile_shape(x, inner), x.buffer.dtype,
                             Scope.SHARED)
            steps.append(Copy(_region(x, inner), full_region(buf), loc=red.loc))
            return buf
        name = "prologue_shared" if not always else "operand_shared"
        buf = self.alloc(name, tuple(inner[d].tile for d in dims), x.dtype, Scope.SHARED)
        local = {n: _ZERO for n in inner if inner[n].tile == 1}  # one-element dims
        local.update(self.locals(dims, inner))
        comp: list = []
        value = self.subst(x, local, inner, comp)
        k = inner[red.var.name]
        if not (isinstance(red.extent, Const) and int(red.extent.value) % k.tile == 0):
            kk = exprs.call(Op.ADD, [k.start, local[red.var.name]], red.loc)
            zero = exprs.make_const(0, x.dtype, red.loc)
            value = exprs.call(Op.SELECT, [exprs.call(Op.LT, [kk, red.extent], red.loc), value,
                                           zero], red.loc)
        lets, value = self.common(value, red.loc)
        store = Store(buf, tuple(local[d] for d in dims), value, loc=red.loc)
        comp.extend(self.parallel(dims, local, inner, lets + [store], red.loc))
        hit = self.chunk_holding(x, red, dims, k.tile) if always else None
        if hit is None:
            steps.extend(comp)
            return buf
        t, tdims = hit
        loc2 = {n: _ZERO for n in inner if inner[n].tile == 1}
        loc2.update(self.locals(dims, inner))
        idx = tuple(loc2[d] for d in tdims) + (loc2[red.var.name],)
        read = Store(buf, tuple(loc2[d] for d in dims), Load(t, idx), loc=red.loc)
        steps.append(If(exprs.call(Op.GT, [red.extent, k.tile], red.loc), tuple(comp),
                        tuple(self.parallel(dims, loc2, inner, [read], red.loc)),
                        loc=red.loc))
        return buf

    def chunk_holding(self, x: Expr, red: Red, dims: list[str], bk: int):
        """(chunk, its dims) of a launch-level reduction over the same range in chunks of
        bk whose body is x (up to variable names; reductions compared by the fragment
        holding them): for a one-chunk row the chunk holds x's values, 0 past the end
        when its identity is 0."""
        want = self.canon(x, red.var.name)
        for t, cdims, cbk, c in self.chunks.values():
            ident = reduce_identity(c.kind, c.out.dtype)
            if cbk != bk or c.extent != red.extent or ident != 0 or \
                    c.out.dtype != x.dtype or not set(cdims) <= set(dims) | self.ones(cdims):
                continue
            if self.canon(c.body, c.var.name) == want:
                return t, cdims
        return None

    def ones(self, dims: list[str]) -> set:
        return {d for d in dims if self.low.tiles.get(d, 1) == 1 and d in self.body.index}

    def canon(self, e: Expr, var: str) -> Expr:
        """e with `var` renamed and each reduction placeholder that has a fragment named
        by that fragment (equal contractions share one)."""
        if isinstance(e, Var):
            if e.name == var:
                return Var("__k", e.dtype)
            frag = self.red_frags.get(e.name)
            return Var("__frag_" + frag[0].name, e.dtype) if frag else e
        if isinstance(e, Load):
            return Load(e.buffer, tuple(self.canon(ix, var) for ix in e.indices))
        if isinstance(e, Call):
            return Call(e.op, tuple(self.canon(a, var) for a in e.args), e.dtype, e.loc)
        return e

    # ------------------------------------------------------------ reductions
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
        t = self.alloc("chunk", shape + (bk,), acc)
        if where is self.stmts:
            self.chunks[red.out.name] = (t, dims, bk, red)
        ld = _plain_read(red, dims)
        if ld is not None and is_tile_access(ld, inner):  # the chunk is a tile: copy it
            loop.append(Copy(_region(ld, inner), full_region(t), loc=red.loc))
            if where is self.stmts and t.dtype == ld.buffer.dtype:
                self.row_chunks.append((t, _canon(ld, red.var.name), red.extent, bk, dims))
        else:
            if where is self.stmts:
                self.share_chunks(red, dims, bk, inner, loop)
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

    def gemm_form(self, red: Red, dims: list[str], ctx: dict):
        """(x, y, a, b) when the reduction is a contraction over two of its tiled dims
        (the others have tile 1): a sum of a * b, a over (x, var), b over (var, y). Its
        chunk then is a T.gemm instead of a (x, y, var) product tile and a reduce."""
        tiled = [d for d in dims if ctx[d].tile > 1]
        b = red.body
        if red.kind.value != "sum" or len(tiled) != 2 or not \
                (isinstance(b, Call) and b.op is Op.MUL):
            return None
        x, y = tiled
        ones = set(dims) - {x, y}
        a_, b_ = (_unwrap_acc(f, red.out.dtype) for f in b.args)
        if a_ is None or b_ is None:
            return None

        def uses(f):
            return set(free_indices(self.body, f)) - ones

        for p, q in ((a_, b_), (b_, a_)):
            if uses(p) <= {x, red.var.name} and uses(q) <= {red.var.name, y}:
                return x, y, p, q
        return None

    def gemm_reduction(self, red: Red, form, reds: list[Red], ctx: dict,
                       where: list) -> None:
        """A contraction inside a row kernel: per chunk of its variable, both operand
        tiles computed (0 past the end) into shared tiles and `T.gemm` into the result's
        fragment: the contract's order, as the chunked reduce would fold it."""
        x, y, a, b = form
        bk = self.low.tile(red.var.name)
        key, again = self.same_contraction(red, y, bk, ctx)
        if again is not None:  # the same contraction, computed earlier for this chunk
            acc = again[0]
        else:
            acc = self.alloc("red", (ctx[x].tile, ctx[y].tile), red.out.dtype)
            if key is not None:
                self.contractions[key] = (acc, ctx[y].extent, ctx[y].tile)
        self.red_frags[red.out.name] = (acc, [x, y])
        stmts: list = [Fill(full_region(acc), Const(0, acc.dtype), loc=red.loc)]
        ko = Var(self.low.fresh("ko"), int32)
        start = exprs.call(Op.MUL, [ko, bk], red.loc)
        inner = {**ctx, red.var.name: Dim(start, bk, red.extent)}
        loop: list = []
        self.reductions(reds, red.var.name, inner, loop)
        a_s = self.operand(a, [x, red.var.name], inner, loop, red, always=True)
        b_s = self.operand(b, [red.var.name, y], inner, loop, red, always=True)
        loop.append(Gemm(full_region(a_s), full_region(b_s), full_region(acc), loc=red.loc))
        stmts.append(For(ko, _ZERO, ceildiv(red.extent, bk), _ONE, ForKind.SERIAL,
                         tuple(loop), loc=red.loc))
        if again is None:
            where.extend(stmts)
        else:  # when the row is one chunk the earlier result is this chunk's: keep it
            _, ext, obk = again
            where.append(If(exprs.call(Op.GT, [ext, obk], red.loc), tuple(stmts),
                            loc=red.loc))

    def same_contraction(self, red: Red, y: str, bk: int, ctx: dict):
        """(key, earlier) for a contraction computed inside another reduction's loop (y is
        that reduction's variable): the same body up to the two variables' names, with the
        same chunk sizes, was computed before into `earlier` = (fragment, y's extent, y's
        chunk), or None. Other contractions: (None, None)."""
        if y in self.body.index:
            return None, None
        outer = ctx[y]
        canon = _rename(_rename(red.body, red.var.name, Var("__k", int32)), y,
                        Var("__o", int32))
        key = (canon, red.extent, bk, outer.extent, outer.tile)
        return key, self.contractions.get(key)

    def share_chunks(self, red: Red, dims: list[str], bk: int, inner: dict,
                     loop: list) -> None:
        """A tile this reduction reads that an earlier one copied whole as its chunk (the
        same rows, range and chunk size) is read from that chunk: when the row is one
        chunk it is already there (softmax's exp pass reads the max pass's copy of x), so
        it is copied again only for longer rows. Past the end the chunk holds the earlier
        reduction's identity instead of 0; this reduction masks those places anyway."""
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


def is_tile_access(ld: Load, names) -> bool:
    """Indices that are distinct index names (of `names`) or constants: a tile copy."""
    vars_ = [x.name for x in ld.indices if isinstance(x, Var)]
    return all(isinstance(x, Const) or isinstance(x, Var) and x.name in names
               for x in ld.indices) and len(vars_) == len(set(vars_))


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


def _rename(e: Expr, name: str, new: Var) -> Expr:
    if isinstance(e, Var):
        return new if e.name == name else e
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_rename(x, name, new) for x in e.indices))
    if isinstance(e, Call):
        return Call(e.op, tuple(_rename(a, name, new) for a in e.args), e.dtype, e.loc)
    return e


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


def _tile_shape(ld: Load, ctx: dict) -> tuple[int, ...]:
    return tuple(ctx[x.name].tile if isinstance(x, Var) else 1 for x in ld.indices)


def _region(ld: Load, ctx: dict) -> Region:
    starts = tuple(ctx[x.name].start if isinstance(x, Var) else x for x in ld.indices)
    ext = tuple(Const(ctx[x.name].tile if isinstance(x, Var) else 1, int32)
                for x in ld.indices)
    return Region(ld.buffer, starts, ext)
