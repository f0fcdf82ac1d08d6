"""The single home of hypothesis strategies: dtypes, shapes, arrays, and small IR programs.

Programs come from a seed-indexed family (`program(seed)`, at most `FAMILY_SIZE` distinct
programs per family) because each costs a Numba compile in the JIT's differential tests;
test data varies freely. Builders here type every call with the op table's rules.
"""

from __future__ import annotations

import math
import random

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tilepy.errors import TileTypeError
from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, full_region
from tilepy.ir.ops import OPS, Compute, Op, result_dtype
from tilepy.ir.stmt import (
    Alloc,
    Copy,
    Cumsum,
    Fill,
    For,
    ForKind,
    Gemm,
    Launch,
    PrimFunc,
    Reduce,
    ReduceKind,
    Store,
)
from tilepy.ir.types import Scope, bool_, dtype, float32
from tilepy.precision.formats import FORMATS

# ---------------------------------------------------------------- dtypes, shapes, arrays

FLOAT_DTYPES = [n for n, f in FORMATS.items() if f.is_float and n != "float8_e8m0fnu"]
INT_DTYPES = [n for n, f in FORMATS.items() if f.is_int]
TILE_INPUT_DTYPES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


def dtypes(kinds: tuple[str, ...] = ("float", "int", "uint", "bool")):
    """Names of formats of the given kinds (ml_dtypes spelling)."""
    return st.sampled_from([n for n, f in FORMATS.items() if f.kind in kinds])


def shapes(max_dims: int = 3, max_side: int = 9, min_dims: int = 1):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=max_side)


def special_values(name: str) -> list[float]:
    """NaN, +-inf, +-0.0, the smallest subnormal and normal, the largest finite, of a
    float format (values the format cannot hold become what ml_dtypes makes of them)."""
    f = FORMATS[name]
    vals = [0.0, -0.0, math.nan, math.inf, -math.inf, f.max_finite, -f.max_finite,
            f.min_normal, f.min_subnormal, -f.min_subnormal, 1.0, -1.0, 0.5]
    return vals if f.has_sign else [abs(v) for v in vals if not v < 0]


def float_elements(name: str):
    f = FORMATS[name]
    finite = st.floats(-f.max_finite, f.max_finite, allow_nan=False, width=64)
    if not f.has_sign:
        finite = st.floats(0.0, f.max_finite, allow_nan=False, width=64)
    return st.one_of(st.sampled_from(special_values(name)), finite)


def arrays(name: str, shape):
    """Arrays of a format (numpy or ml_dtypes dtype); floats include NaN, inf, -0.0 and
    subnormals; integers span the whole range (int4/uint4 included)."""
    f = FORMATS[name]
    if f.is_float:
        base = hnp.arrays(np.float64, shape, elements=float_elements(name))
        return base.map(lambda a: a.astype(f.np_dtype))
    if f.is_bool:
        return hnp.arrays(np.bool_, shape)
    lo, hi = int_range(f)
    if f.bits == 4:  # ml_dtypes' int4/uint4: draw int8, then convert
        base = hnp.arrays(np.int8, shape, elements=st.integers(lo, hi))
        return base.map(lambda a: a.astype(f.np_dtype))
    return hnp.arrays(f.np_dtype, shape, elements=st.integers(lo, hi))


def int_range(f) -> tuple[int, int]:
    """The exact (min, max) of an integer format (the table's float limits round int64)."""
    info = ml_dtypes.iinfo(f.np_dtype)
    return int(info.min), int(info.max)


# ---------------------------------------------------------------- typed builders


def c(value, dt="int32") -> Const:
    return Const(value, dtype(dt))


def call(op: Op, *args) -> Call:
    """`op(*args)` typed by the op table's rule (TileTypeError when it does not apply)."""
    return Call(op, tuple(args), result_dtype(op, tuple(a.dtype for a in args)))


def cast(x, dt, saturate: bool = False) -> Call:
    return Call(Op.CAST_SAT if saturate else Op.CAST, (x,), dtype(dt))


def dims(shape) -> tuple[Const, ...]:
    """A static shape as int32 constants (what Buffer.shape holds)."""
    return tuple(c(n) for n in shape)


def region(buf: Buffer, starts, extents) -> Region:
    return Region(buf, tuple(starts), tuple(extents))


def tile_at(buf: Buffer, block_vars, tile) -> Region:
    """The tile of a 2-d global buffer at block (by, bx): rows by*T0, cols bx*T1."""
    starts = [call(Op.MUL, v, c(t)) for v, t in zip(block_vars, tile)]
    return region(buf, starts, [c(t) for t in tile])


def ceildiv(n, t: int):
    return call(Op.FLOORDIV, call(Op.ADD, n, c(t - 1)), c(t))


def parallel_nest(vars_, extents, body) -> For:
    """Nested T.Parallel loops over `extents` around `body`."""
    for v, e in reversed(list(zip(vars_, extents))):
        body = (For(v, c(0), c(e), c(1), ForKind.PARALLEL, tuple(body)),)
    return body[0]


# ---------------------------------------------------------------- op table queries


def ops_for(dt, arity: int, compute=None) -> list[Op]:
    """Ops of the table that accept `arity` operands of `dt` and give `dt` back."""
    out = []
    for op, row in OPS.items():
        if row.arity != arity or row.compute is Compute.CONVERT:
            continue
        if compute is not None and row.compute not in compute:
            continue
        try:
            if result_dtype(op, (dt,) * arity) == dt:
                out.append(op)
        except TileTypeError:
            pass
    return out


def random_chain(rng: random.Random, leaves: list, depth: int):
    """A random expression over `leaves` (all one dtype) from the table's ops of that dtype,
    with an occasional comparison feeding T.if_then_else."""
    dt = leaves[0].dtype
    if depth == 0:
        return rng.choice(leaves)
    pick = rng.random()
    if pick < 0.35:
        return call(rng.choice(ops_for(dt, 1)), random_chain(rng, leaves, depth - 1))
    if pick < 0.85:
        op = rng.choice(ops_for(dt, 2))
        return call(op, random_chain(rng, leaves, depth - 1), random_chain(rng, leaves, depth - 1))
    a, b = random_chain(rng, leaves, depth - 1), random_chain(rng, leaves, depth - 1)
    cmp = rng.choice([Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE])
    return call(Op.SELECT, call(cmp, a, b), a, b)


def representable(value: float, dt) -> float:
    """`value` rounded to a float format, once (as the front end rounds literals)."""
    from tilepy.precision import cast as round_once

    return float(np.asarray(round_once(np.asarray([value], np.float64), dt.name)[0], np.float64))


def random_literal(rng: random.Random, dt) -> Const:
    """A literal of `dt`, often an edge value (negative, -0.0, inf, NaN, extremes)."""
    if dt.is_bool:
        return Const(rng.random() < 0.5, dt)
    if dt.is_float:
        pool = [v for v in special_values(dt.name) if not (v != v and rng.random() < 0.7)]
        pool += [rng.uniform(-4, 4), round(rng.uniform(-100, 100), 1)]
        return Const(representable(rng.choice(pool), dt), dt)
    lo, hi = int_range(dt)
    return Const(rng.choice([v for v in (0, 1, -1, 3) if lo <= v <= hi]
                            + [lo, hi, rng.randint(lo, hi)]), dt)


def random_expr(rng: random.Random, leaves: dict, dt, depth: int):
    """A random, well-typed expression of dtype `dt` using every kind of op of the table:
    arithmetic, transcendental, comparisons, logic, bit ops, select, casts. `leaves` maps
    a dtype to the expressions (vars, loads) that may appear; literals are added."""
    if depth == 0 or rng.random() < 0.15:
        pool = leaves.get(dt, [])
        return rng.choice(pool) if pool and rng.random() < 0.7 else random_literal(rng, dt)
    sub = lambda t: random_expr(rng, leaves, t, depth - 1)  # noqa: E731
    other = rng.choice([t for t in leaves if not t.is_bool] or [dt])
    if dt.is_bool:
        choice = rng.choice(["cmp", "cmp", "and_or", "not"])
        if choice == "cmp":
            op = rng.choice([Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE])
            return call(op, sub(other), sub(other))
        if choice == "not":
            return call(Op.NOT, sub(dt))
        return call(rng.choice([Op.AND, Op.OR]), sub(dt), sub(dt))
    choice = rng.choice(["unary", "binary", "binary", "select", "cast"])
    if choice == "unary" and ops_for(dt, 1):
        return call(rng.choice(ops_for(dt, 1)), sub(dt))
    if choice == "select":
        return call(Op.SELECT, sub(bool_), sub(dt), sub(dt))
    if choice == "cast" and other != dt:
        op = rng.choice([Op.CAST, Op.CAST_SAT]) if dt.is_float else Op.CAST
        return Call(op, (sub(other),), dt)
    return call(rng.choice(ops_for(dt, 2)), sub(dt), sub(dt))


def scalar_exprs(leaves: dict, dts=None, depth: int = 4):
    """Strategy: random expressions (see `random_expr`) over `leaves` ({DType: [Expr]}),
    of one of the dtypes `dts` (default: the leaves' dtypes)."""
    dts = list(dts or leaves)
    return st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(dts)).map(
        lambda sd: random_expr(random.Random(sd[0]), leaves, sd[1], depth))


# ---------------------------------------------------------------- the program family

FAMILY_SIZE = 20
TILES = [(4, 8), (8, 8), (8, 4), (16, 8)]
KINDS = ("elementwise", "reduce", "gemm", "cast", "copy")


def program(seed: int, kind: str | None = None) -> PrimFunc:
    """The program of a seed: same seed, same program (structurally equal)."""
    rng = random.Random(seed)
    kind = kind or KINDS[seed % len(KINDS)]
    return _BUILDERS[kind](rng, f"{kind}_{seed}")


def programs(kinds: tuple[str, ...] = KINDS, family: int = FAMILY_SIZE):
    """A strategy over at most `family` distinct programs of the given kinds."""
    seeds = [s for s in range(family * len(KINDS)) if KINDS[s % len(KINDS)] in kinds][:family]
    return st.sampled_from(seeds).map(program)


def sizes_for(func: PrimFunc, max_size: int = 40):
    """Values for a program's symbolic sizes (edge tiles included)."""
    return st.fixed_dictionaries({v.name: st.integers(1, max_size) for v in func.sizes})


def _grid_2d(rng: random.Random, name: str, dts):
    """Sizes M, N; one (M, N) global per dtype in `dts`; block vars; a tile shape."""
    M, N = Var("M"), Var("N")
    tile = rng.choice(TILES)
    bufs = [Buffer(n, (M, N), dtype(d)) for n, d in zip("XYZWO", dts)]
    bx, by = Var("bx"), Var("by")
    grid = (ceildiv(N, tile[1]), ceildiv(M, tile[0]))
    return (M, N), bufs, (bx, by), grid, tile


def _elementwise(rng: random.Random, name: str) -> PrimFunc:
    """Out = chain(X, Y) tile by tile, computed in a fragment of the compute dtype."""
    din = rng.choice(TILE_INPUT_DTYPES)
    acc = rng.choice(["float32", din]) if din in ("float16", "bfloat16") else "float32"
    sizes, (X, Y, O), bv, grid, tile = _grid_2d(rng, name, (din, din, rng.choice([din, acc])))
    xf = Buffer("X_frag", dims(tile), dtype(acc), Scope.FRAGMENT)
    yf = Buffer("Y_frag", dims(tile), dtype(acc), Scope.FRAGMENT)
    xs = Buffer("X_shared", dims(tile), dtype(din), Scope.SHARED)
    i, j = Var("i"), Var("j")
    leaves = [Load(xf, (i, j)), Load(yf, (i, j))]
    expr = random_chain(rng, leaves, rng.randint(1, 3))
    rows = (bv[1], bv[0])
    body = (
        Alloc(xs), Alloc(xf), Alloc(yf),
        Copy(tile_at(X, rows, tile), full_region(xs)),
        Copy(full_region(xs), full_region(xf)),
        Copy(tile_at(Y, rows, tile), full_region(yf)),
        parallel_nest((i, j), tile, (Store(xf, (i, j), expr),)),
        Copy(full_region(xf), tile_at(O, rows, tile)),
    )
    launch = Launch(grid, bv, (128,), body)
    return PrimFunc(name, (X, Y, O), sizes, (launch,), out_idx=(2,))


def _reduce(rng: random.Random, name: str) -> PrimFunc:
    """Per-tile reduction along rows or columns, then a store of the partial results."""
    din = rng.choice(["float32", "float16", "bfloat16"])
    sizes, (X,), bv, grid, tile = _grid_2d(rng, name, (din,))
    kind = rng.choice(list(ReduceKind))
    dim = rng.randint(0, 1)
    keep = rng.random() < 0.5
    acc = dtype("float32")
    xf = Buffer("X_frag", dims(tile), acc, Scope.FRAGMENT)
    out_tile = tuple(1 if d == dim else t for d, t in enumerate(tile))
    rshape = out_tile if keep else tuple(t for d, t in enumerate(tile) if d != dim)
    rf = Buffer("R_frag", dims(rshape), acc, Scope.FRAGMENT)
    M, N = sizes
    O = Buffer("O", (M, N), acc)
    rows = (bv[1], bv[0])
    clear = rng.random() < 0.7
    body = [Alloc(xf), Alloc(rf), Copy(tile_at(X, rows, tile), full_region(xf))]
    if not clear:
        body.append(Fill(full_region(rf), Const(rng.choice([0.0, 1.0, -2.5]), acc)))
    body.append(Reduce(kind, full_region(xf), full_region(rf), dim, clear))
    if rng.random() < 0.5:
        body.append(Cumsum(full_region(xf), full_region(xf), 1 - dim, rng.random() < 0.5))
    dst = region(O, [call(Op.MUL, v, c(t)) for v, t in zip(rows, tile)], [c(e) for e in out_tile])
    body.append(Copy(full_region(rf), dst))
    launch = Launch(grid, bv, (128,), tuple(body))
    return PrimFunc(name, (X, O), sizes, (launch,), out_idx=(1,))


def _gemm(rng: random.Random, name: str) -> PrimFunc:
    """C = op(A) @ op(B) with a pipelined k loop, fragments in float32, optional epilogue."""
    din = rng.choice(["float32", "float16", "bfloat16", "float8_e4m3fn"])
    ta, tb = rng.random() < 0.3, rng.random() < 0.5
    bm, bn = rng.choice(TILES)
    bk = rng.choice([4, 8])
    M, N, K = Var("M"), Var("N"), Var("K")
    A = Buffer("A", (K, M) if ta else (M, K), dtype(din))
    B = Buffer("B", (N, K) if tb else (K, N), dtype(din))
    C = Buffer("C", (M, N), dtype(rng.choice(["float32", din])))
    bx, by, k = Var("bx"), Var("by"), Var("k")
    a_tile, b_tile = ((bk, bm) if ta else (bm, bk)), ((bn, bk) if tb else (bk, bn))
    As = Buffer("A_shared", dims(a_tile), A.dtype, Scope.SHARED)
    Bs = Buffer("B_shared", dims(b_tile), B.dtype, Scope.SHARED)
    Cf = Buffer("C_frag", dims((bm, bn)), float32, Scope.FRAGMENT)
    a_at = (k, by) if ta else (by, k)
    b_at = (bx, k) if tb else (k, bx)
    loop = For(k, c(0), ceildiv(K, bk), c(1), ForKind.PIPELINED, (
        Copy(tile_at(A, a_at, a_tile), full_region(As)),
        Copy(tile_at(B, b_at, b_tile), full_region(Bs)),
        Gemm(full_region(As), full_region(Bs), full_region(Cf), ta, tb),
    ), num_stages=rng.choice([0, 2, 3]))
    body = [Alloc(As), Alloc(Bs), Alloc(Cf), Fill(full_region(Cf), Const(0.0, float32)), loop]
    if rng.random() < 0.5:
        i, j = Var("i"), Var("j")
        x = Load(Cf, (i, j))
        expr = random_chain(rng, [x, x], rng.randint(1, 2))
        body.append(parallel_nest((i, j), (bm, bn), (Store(Cf, (i, j), expr),)))
    body.append(Copy(full_region(Cf), tile_at(C, (by, bx), (bm, bn))))
    launch = Launch((ceildiv(N, bn), ceildiv(M, bm)), (bx, by), (128,), tuple(body))
    return PrimFunc(name, (A, B, C), (M, N, K), (launch,), out_idx=(2,))


def _cast(rng: random.Random, name: str) -> PrimFunc:
    """Out = cast(X) element by element (saturating or not) through a local tile."""
    din, dout = rng.choice(FLOAT_DTYPES + ["int32", "int8"]), rng.choice(FLOAT_DTYPES + ["int8"])
    sizes, (X, O), bv, grid, tile = _grid_2d(rng, name, (din, dout))
    xl = Buffer("X_local", dims(tile), X.dtype, Scope.LOCAL)
    ol = Buffer("O_local", dims(tile), O.dtype, Scope.LOCAL)
    i, j = Var("i"), Var("j")
    sat = rng.random() < 0.3 and O.dtype.is_float
    rows = (bv[1], bv[0])
    body = (
        Alloc(xl), Alloc(ol),
        Copy(tile_at(X, rows, tile), full_region(xl)),
        parallel_nest((i, j), tile, (Store(ol, (i, j), cast(Load(xl, (i, j)), O.dtype, sat)),)),
        Copy(full_region(ol), tile_at(O, rows, tile)),
    )
    return PrimFunc(name, (X, O), sizes, (Launch(grid, bv, (128,), body),), out_idx=(1,))


def _copy(rng: random.Random, name: str) -> PrimFunc:
    """Global -> (shared | fragment | local)* -> global, converting dtypes on the way."""
    din, dout = rng.choice(TILE_INPUT_DTYPES), rng.choice(TILE_INPUT_DTYPES)
    sizes, (X, O), bv, grid, tile = _grid_2d(rng, name, (din, dout))
    rows = (bv[1], bv[0])
    stages = [Buffer(f"T{n}", dims(tile), dtype(rng.choice(TILE_INPUT_DTYPES)),
                     rng.choice([Scope.SHARED, Scope.FRAGMENT, Scope.LOCAL]))
              for n in range(rng.randint(1, 3))]
    body = [Alloc(b) for b in stages]
    body.append(Copy(tile_at(X, rows, tile), full_region(stages[0])))
    for a, b in zip(stages, stages[1:]):
        body.append(Copy(full_region(a), full_region(b)))
    body.append(Copy(full_region(stages[-1]), tile_at(O, rows, tile)))
    return PrimFunc(name, (X, O), sizes, (Launch(grid, bv, (128,), tuple(body)),),
                    out_idx=(1,))


_BUILDERS = {"elementwise": _elementwise, "reduce": _reduce, "gemm": _gemm, "cast": _cast,
             "copy": _copy}


# ---------------------------------------------------------------- models (autograd shapes)


@st.composite
def conv_cases(draw):
    """(N, C, H, W, F, K, stride, pad, groups) for a conv2d small enough for finite
    differences in the interpreter; kernels take every size symbolically (no compile)."""
    groups = draw(st.sampled_from([1, 1, 2]))
    c, f = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    k = draw(st.integers(1, 3))
    stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, 1))
    h = draw(st.integers(max(1, k - 2 * pad), 5))
    w = draw(st.integers(max(1, k - 2 * pad), 5))
    return draw(st.integers(1, 2)), c, h, w, f, k, stride, pad, groups
