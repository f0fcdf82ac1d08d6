"""Contractions in a tile op: matching `sum(a * b)` to T.gemm's form (a gemm output, a
contraction inside a row kernel), and the launch statements that compute one: operand tiles
(copied, computed from a prologue, or read from an earlier chunk) and `T.gemm` per chunk of
the reduction. A mixin of lower.py's launch builder; semantics stay the statements'.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.frontend import exprs
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Region, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Alloc, Copy, Fill, For, ForKind, Gemm, If, Store
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import Scope, int32
from tilepy.tileop.body import OpBody, Red, free_indices
from tilepy.tileop.implicit import ceildiv
from tilepy.tileop.schedule import gemm_tiles

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



class Contractions:
    """The contraction statements of `_Launch` (lower.py), which provides alloc, subst,
    locals, parallel, common, reductions and the fragment tables."""

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
        comp = self.compute_operand(x, buf, dims, dims, inner, red)
        k = inner[red.var.name]
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

    def compute_operand(self, x: Expr, buf: Buffer, bdims: list[str], dims: list[str],
                        inner: dict, red: Red) -> list:
        """The statements computing operand x over `dims` into buf (indexed by `bdims`:
        dims and one-element dims), 0 past the end of the reduction."""
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
        store = Store(buf, tuple(local[d] for d in bdims), value, loc=red.loc)
        comp.extend(self.parallel(dims, local, inner, lets + [store], red.loc))
        return comp

    def row_operand(self, x: Expr, dims: list[str], inner: dict, steps: list,
                    red: Red) -> tuple[Buffer, bool]:
        """A contraction's operand inside a row kernel and whether T.gemm reads it
        transposed. An earlier reduction's chunk holding x's values (for a one-chunk row)
        is the operand itself, its values computed into it only for longer rows; a tile
        read is copied into a shared tile in the tensor's own order (a copy reads 0 past
        the end, where the range ends too), the gemm transposing it if need be (the
        scores' k[l, e]); anything else is computed into a shared tile."""
        k = inner[red.var.name]
        hit = self.chunk_holding(x, red, dims, k.tile)
        order = _order(hit[1] + [red.var.name], dims, inner) if hit else None
        if order is not None:
            t, tdims = hit
            comp = self.compute_operand(x, t, tdims + [red.var.name], dims, inner, red)
            steps.append(If(exprs.call(Op.GT, [red.extent, k.tile], red.loc), tuple(comp),
                            loc=red.loc))
            return self.matrix_view(t), order != dims
        order = _order([v.name if isinstance(v, Var) else "" for v in x.indices], dims,
                       inner) if isinstance(x, Load) and hit is None else None
        if order is None:
            return self.operand(x, dims, inner, steps, red, always=True), False
        buf = self.alloc(x.buffer.name + "_shared", tuple(inner[d].tile for d in order),
                         x.buffer.dtype, Scope.SHARED)
        steps.append(Copy(_region(x, inner), full_region(buf), loc=red.loc))
        return buf, order != dims

    def matrix_view(self, t: Buffer) -> Buffer:
        """t (whose leading dims are 1) re-viewed as the 2-d tile T.gemm takes."""
        if t.ndim == 2:
            return t
        view = Buffer(self.low.fresh(t.name + "_mat"), t.shape[-2:], t.dtype, t.scope, data=t)
        self.allocs.append(Alloc(view, loc=self.loc))
        return view

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
        a_s, ta = self.row_operand(a, [x, red.var.name], inner, loop, red)
        b_s, tb = self.row_operand(b, [red.var.name, y], inner, loop, red)
        loop.extend(self.panels(a_s, ta, b_s, tb, acc, red))
        stmts.append(For(ko, _ZERO, ceildiv(red.extent, bk), _ONE, ForKind.SERIAL,
                         tuple(loop), loc=red.loc))
        if again is None:
            where.extend(stmts)
        else:  # when the row is one chunk the earlier result is this chunk's: keep it
            _, ext, obk = again
            where.append(If(exprs.call(Op.GT, [ext, obk], red.loc), tuple(stmts),
                            loc=red.loc))

    def panels(self, a: Buffer, ta: bool, b: Buffer, tb: bool, c: Buffer, red: Red) -> list:
        """T.gemm(a, b, c), split into panels of the model's gemm tile width when the
        operands are wider (a row kernel's 256-key chunks): over c's columns, or else over
        k ascending. Each B panel then stays in L1 while the rows of C pass over it; no
        element's order changes (a k split adds the same products in the same order)."""
        dims = [int(x.value) for x in c.shape[-2:]]
        k = int((a.shape[-2] if ta else a.shape[-1]).value)
        width = gemm_tiles(4, 4)[1]
        if dims[1] > width and dims[1] % width == 0:
            split, steps = "n", dims[1] // width
        elif k > width and k % width == 0:
            split, steps = "k", k // width
        else:
            return [Gemm(full_region(a), full_region(b), full_region(c), ta, tb, loc=red.loc)]
        p = Var(self.low.fresh("p"), int32)
        start = exprs.call(Op.MUL, [p, width], red.loc)

        def part(buf: Buffer, axis: int) -> Region:  # buf's `axis` (-1, -2) in the panel
            r = full_region(buf)
            starts, ext = list(r.starts), list(r.extents)
            starts[axis], ext[axis] = start, Const(width, int32)
            return Region(buf, tuple(starts), tuple(ext))

        if split == "n":
            g = Gemm(full_region(a), part(b, -2 if tb else -1), part(c, -1), ta, tb,
                     loc=red.loc)
        else:
            g = Gemm(part(a, -2 if ta else -1), part(b, -1 if tb else -2), full_region(c), ta,
                     tb, loc=red.loc)
        return [For(p, _ZERO, Const(steps, int32), _ONE, ForKind.SERIAL, (g,), loc=red.loc)]

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

def is_tile_access(ld: Load, names) -> bool:
    """Indices that are distinct index names (of `names`) or constants: a tile copy."""
    vars_ = [x.name for x in ld.indices if isinstance(x, Var)]
    return all(isinstance(x, Const) or isinstance(x, Var) and x.name in names
               for x in ld.indices) and len(vars_) == len(set(vars_))



def _rename(e: Expr, name: str, new: Var) -> Expr:
    if isinstance(e, Var):
        return new if e.name == name else e
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_rename(x, name, new) for x in e.indices))
    if isinstance(e, Call):
        return Call(e.op, tuple(_rename(a, name, new) for a in e.args), e.dtype, e.loc)
    return e



def _order(names: list[str], dims: list[str], inner: dict) -> list[str] | None:
    """The two gemm dims in the order a tile over `names` (index names, "" for a
    constant) holds them, when every other name is a one-element dim before them (T.gemm
    takes tiles whose leading dims are 1); else None."""
    order = [n for n in names if n in dims]
    rest = names[:len(names) - 2]
    if sorted(order) != sorted(dims) or names[-2:] != order or \
            any(n and inner[n].tile != 1 for n in rest):
        return None
    return order


def _tile_shape(ld: Load, ctx: dict) -> tuple[int, ...]:
    return tuple(ctx[x.name].tile if isinstance(x, Var) else 1 for x in ld.indices)


def _region(ld: Load, ctx: dict) -> Region:
    starts = tuple(ctx[x.name].start if isinstance(x, Var) else x for x in ld.indices)
    ext = tuple(Const(ctx[x.name].tile if isinstance(x, Var) else 1, int32)
                for x in ld.indices)
    return Region(ld.buffer, starts, ext)
