"""Contractions whose operands are not plain tiles (a convolution's shifted windows, an
output of rank > 2): the library conv's implicit gemm. The output is a (rows, columns)
matrix over its last index; per k step the A tile is gathered element by element (0
outside the input, past the rows and past K), the B tile copied from a row-major matrix
view of its tensor when its indices are the reduction's variables in order (else gathered
too), and `T.gemm` accumulates: the contract's k order, so the library conv's bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.errors import NOLOC
from tilepy.frontend import exprs
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Region, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Alloc, Copy, Fill, For, ForKind, Gemm, If, Let, Store
from tilepy.ir.types import Scope, int32
from tilepy.tileop.body import OpBody, Red, free_indices

_ZERO, _ONE = Const(0, int32), Const(1, int32)


@dataclass(frozen=True)
class Implicit:
    red: Red
    a: Expr  # depends on the row indices and the reduction variable
    b: Expr  # depends on the column index and the reduction variable
    matrix_b: bool  # b reads its tensor as a row-major (K, columns) matrix


def match_implicit(body: OpBody, e: Expr, names: list[str], reds: list[Red]):
    """The output is a single sum of a product whose one factor does not use the column
    index and the other uses no row index."""
    if len(names) < 2 or len(reds) != 1 or e != reds[0].out or reds[0].kind.value != "sum":
        return None
    red = reds[0]
    if not (isinstance(red.body, Call) and red.body.op is Op.MUL):
        return None
    col, rows = names[-1], set(names[:-1])
    x, y = (_unwrap(f, red.out.dtype) for f in red.body.args)
    if None in (x, y):
        return None

    def uses(f):
        return set(free_indices(body, f)) - {red.var.name}

    if col in uses(x):
        x, y = y, x
    if col in uses(x) or uses(y) & rows:
        return None
    matrix = isinstance(y, Load) and y.indices == tuple(red.parts) + (body.index[col],)
    return Implicit(red, x, y, matrix)


def _unwrap(f: Expr, acc):
    """A factor as T.gemm will see it: a widening cast is the gemm's own conversion."""
    if isinstance(f, Call) and f.op is Op.CAST:
        inner = f.args[0]
        ok = inner.dtype.is_float == acc.is_float and inner.dtype.bits <= acc.bits
        return inner if ok and f.dtype == acc else None
    return f


def direct(e: Expr, values: dict[str, Expr], loc, safe: dict | None = None) -> Expr:
    """e with index names replaced by `values` and every access an element read of the
    global tensor, 0 outside it. `safe` maps index expressions (before replacement) to
    their ranges: a dimension indexed by one of them with that size needs no check."""
    safe = safe or {}
    if isinstance(e, Var):
        return values.get(e.name, e)
    if isinstance(e, Load):
        idx = tuple(direct(x, values, loc, safe) for x in e.indices)
        inside = None
        for x, i, size in zip(e.indices, idx, e.buffer.shape):
            if safe.get(x) == size:
                continue
            c = exprs.call(Op.AND, [exprs.call(Op.GE, [i, 0], loc),
                                    exprs.call(Op.LT, [i, size], loc)], loc)
            inside = c if inside is None else exprs.call(Op.AND, [inside, c], loc)
        if inside is None:
            return Load(e.buffer, idx)
        zero = exprs.make_const(0, e.buffer.dtype, loc)
        return exprs.call(Op.SELECT, [inside, Load(e.buffer, idx), zero], loc)
    if isinstance(e, Call):
        return Call(e.op, tuple(direct(a, values, loc, safe) for a in e.args), e.dtype,
                    e.loc)
    return e


def _safe(body: OpBody, red: Red) -> dict:
    """Index expressions that stay in their range inside a gather (rows and k are masked
    to their extents): the output's indices and the reduction's variables."""
    out = {v: body.extents[n] for n, v in body.index.items() if n in body.extents}
    out.update(zip(red.parts, red.part_extents))
    return out


def product(xs: list[Expr], loc) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = exprs.call(Op.MUL, [out, x], loc)
    return out


def emit(la, m: Implicit, out: Buffer, names: list[str], bx: Var, by: Var) -> None:
    """The launch body (into la.stmts / la.allocs); the grid is (columns, rows) tiles."""
    low, loc, red = la.low, la.loc, m.red
    bm, bn, bk = low.tile(names[-2]), low.tile(names[-1]), low.tile(red.var.name)
    n_rows = product(list(out.shape[:-1]), loc)
    a_s = la.alloc(_base(m.a) + "_shared", (bm, bk), m.a.dtype, Scope.SHARED)
    b_s = la.alloc(_base(m.b) + "_shared", (bk, bn), m.b.dtype, Scope.SHARED)
    acc = la.alloc("acc", (bm, bn), red.out.dtype)
    la.stmts.append(Fill(full_region(acc), Const(0, acc.dtype), loc=red.loc))
    ko = Var(low.fresh("ko"), int32)
    kf0 = exprs.call(Op.MUL, [ko, bk], loc)
    pre, steps = gather_a(la, m, names, by, bm, bk, kf0, n_rows, a_s)
    la.stmts.extend(pre)
    if m.matrix_b:
        mat = Buffer(low.fresh(m.b.buffer.name + "_mat"),
                     (red.extent, out.shape[-1]), m.b.dtype, Scope.GLOBAL, m.b.buffer)
        la.allocs.append(Alloc(mat, loc=loc))  # a view is declared as the front end does
        start = (kf0, exprs.call(Op.MUL, [bx, bn], loc))
        steps.append(Copy(Region(mat, start, (Const(bk, int32), Const(bn, int32))),
                          full_region(b_s), loc=red.loc))
    else:
        steps.append(gather_b(la, m, names, bx, bn, bk, kf0, out, b_s))
    steps.append(Gemm(full_region(a_s), full_region(b_s), full_region(acc), loc=red.loc))
    la.stmts.append(For(ko, _ZERO, ceildiv(red.extent, bk), _ONE, ForKind.PIPELINED,
                        tuple(steps), num_stages=2, loc=red.loc))
    view = out if len(out.shape) == 2 else Buffer(
        low.fresh(out.name + "_mat"), (n_rows, out.shape[-1]), out.dtype, Scope.GLOBAL, out)
    if view is not out:
        la.allocs.append(Alloc(view, loc=loc))
    starts = (exprs.call(Op.MUL, [by, bm], loc), exprs.call(Op.MUL, [bx, bn], loc))
    la.stmts.append(Copy(full_region(acc), Region(view, starts, (Const(bm, int32),
                                                                  Const(bn, int32))), loc=loc))


def gather_a(la, m: Implicit, names, by, bm, bk, kf0, n_rows, a_s) -> tuple[list, list]:
    """(statements before the k loop, statements of each k step) that fill the A tile. The
    row digits (output indices) are computed once per block and the reduction's digits once
    per k step, into small int32 tables, so the per-element gather divides by nothing."""
    loc = m.red.loc
    ii, kk = (Var(la.low.fresh(n), int32) for n in ("i_t", "k_t"))
    row_of = lambda v: exprs.call(Op.ADD, [exprs.call(Op.MUL, [by, bm], loc), v], loc)  # noqa: E731
    kf_of = lambda v: exprs.call(Op.ADD, [kf0, v], loc)  # noqa: E731
    digits: dict[str, Expr] = {}
    rest: Expr = Var("__row", int32)
    shape = [la.body.extents[n] for n in names[:-1]]
    for n, size in zip(reversed(names[:-1]), reversed(shape)):  # row-major rows
        digits[n] = exprs.call(Op.MOD, [rest, size], loc) if n != names[0] else rest
        rest = exprs.call(Op.FLOORDIV, [rest, size], loc)
    pre, values = _tables(la, digits, "__row", row_of, ii, bm, loc)
    a, safe = m.a, {}  # every index checked: the JIT then proves the read in range
    kdigits: dict[str, Expr] = {}
    for n, part in enumerate(m.red.parts):
        if isinstance(part, Call) and _contains(a, part):
            ph = Var(la.low.fresh(f"__d{n}"), int32)
            a = _swap(a, part, ph)
            kdigits[ph.name] = part
    steps, kvalues = _tables(la, kdigits, m.red.var.name, kf_of, kk, bk, loc)
    values.update(kvalues)
    values[m.red.var.name] = kf_of(kk)
    keep = exprs.call(Op.AND, [exprs.call(Op.LT, [row_of(ii), n_rows], loc),
                               exprs.call(Op.LT, [kf_of(kk), m.red.extent], loc)], loc)
    zero = exprs.make_const(0, m.a.dtype, loc)
    value = exprs.call(Op.SELECT, [keep, direct(a, values, loc, safe), zero], loc)
    lets, value = la.common(value, loc)
    named, value = _name_indices(la, value, loc)
    inner = For(kk, _ZERO, Const(bk, int32), _ONE, ForKind.PARALLEL,
                (*lets, *named, *_stores(a_s, (ii, kk), value, loc)), loc=loc)
    steps.append(For(ii, _ZERO, Const(bm, int32), _ONE, ForKind.PARALLEL, (inner,), loc=loc))
    return pre, steps


def _tables(la, digits: dict[str, Expr], of: str, value_of, use: Var, size: int, loc):
    """Each digit (an int expression of the variable `of`) for `of` = value_of(t), t in
    [0, size), stored in a (size,) int32 fragment by one T.Parallel: (the fill, the loads
    at `use` by digit name)."""
    if not digits:
        return [], {}
    t = Var(la.low.fresh("t"), int32)
    stores, loads = [], {}
    for name, e in digits.items():
        table = la.alloc(name.strip("_") + "_idx", (size,), int32)
        stores.append(Store(table, (t,), direct(e, {of: value_of(t)}, loc), loc=loc))
        loads[name] = Load(table, (use,))
    return [For(t, _ZERO, Const(size, int32), _ONE, ForKind.PARALLEL, tuple(stores),
                loc=loc)], loads


def _name_indices(la, value: Expr, loc) -> tuple[list, Expr]:
    """Each index of a gathered global read that is read from a table becomes a `Let`, so
    the read's guard compares a variable: the JIT's versioning pass then bounds the read by
    that guard (with symbolic sizes nothing else bounds a table's values) and runs it
    unchecked where the sizes fit the arrays."""
    lets: list = []
    for ld in [x for x in _loads(value) if x.buffer.scope is Scope.GLOBAL]:
        for x in ld.indices:
            if isinstance(x, Load) and not any(let.value == x for let in lets):
                v = Var(la.low.fresh(x.buffer.name.split("_")[0]), x.dtype)
                lets.append(Let(v, x, loc=loc))
                value = _swap(value, x, v)
    return lets, value


def _contains(e: Expr, sub: Expr) -> bool:
    return e == sub or isinstance(e, Call) and any(_contains(a, sub) for a in e.args) or \
        isinstance(e, Load) and any(_contains(x, sub) for x in e.indices)


def _swap(e: Expr, old: Expr, new: Var) -> Expr:
    if e == old:
        return new
    if isinstance(e, Call):
        return Call(e.op, tuple(_swap(a, old, new) for a in e.args), e.dtype, e.loc)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(_swap(x, old, new) for x in e.indices))
    return e


def gather_b(la, m: Implicit, names, bx, bn, bk, kf0, out, b_s) -> For:
    loc = m.red.loc
    kk, jj = (Var(la.low.fresh(n), int32) for n in ("k_t", "j_t"))
    col = exprs.call(Op.ADD, [exprs.call(Op.MUL, [bx, bn], loc), jj], loc)
    kf = exprs.call(Op.ADD, [kf0, kk], loc)
    keep = exprs.call(Op.AND, [exprs.call(Op.LT, [col, out.shape[-1]], loc),
                               exprs.call(Op.LT, [kf, m.red.extent], loc)], loc)
    zero = exprs.make_const(0, m.b.dtype, loc)
    value = direct(m.b, {m.red.var.name: kf, names[-1]: col}, loc, _safe(la.body, m.red))
    lets, value = la.common(exprs.call(Op.SELECT, [keep, value, zero], loc), loc)
    inner = For(jj, _ZERO, Const(bn, int32), _ONE, ForKind.PARALLEL,
                (*lets, *_stores(b_s, (kk, jj), value, loc)), loc=loc)
    return For(kk, _ZERO, Const(bk, int32), _ONE, ForKind.PARALLEL, (inner,), loc=loc)


def _stores(buf: Buffer, idx: tuple, value: Expr, loc) -> tuple:
    """`buf[idx] = value`; selects at the top become an `if` of stores (guarded loads in
    statements, which the JIT's bounds analysis proves in range and leaves unchecked)."""
    if isinstance(value, Call) and value.op is Op.SELECT:
        cond, a, b = value.args
        if isinstance(a, Call) and a.op is Op.SELECT:  # if c1: (if c2: a else 0) else 0
            c2, a2, b2 = a.args
            if b2 == b:
                cond, a = exprs.call(Op.AND, [cond, c2], loc), a2
        return (If(cond, _stores(buf, idx, a, loc), _stores(buf, idx, b, loc), loc=loc),)
    return (Store(buf, idx, value, loc=loc),)


def _base(e: Expr) -> str:
    ld = next((x for x in _loads(e)), None)
    return ld.buffer.name if ld is not None else "operand"


def _loads(e: Expr):
    if isinstance(e, Load):
        yield e
    elif isinstance(e, Call):
        for a in e.args:
            yield from _loads(a)


def ceildiv(n: Expr, t: int) -> Expr:
    if isinstance(n, Const):
        return Const(-(-int(n.value) // t), int32)
    return exprs.call(Op.FLOORDIV, [exprs.call(Op.ADD, [n, t - 1], NOLOC), t], NOLOC)
