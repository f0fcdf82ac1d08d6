"""Hand-built IR programs the IR tests share (until the front end can write them).

Each mirrors a TileLang kernel a user would write; locs point at a pretend source file so
the printer's `# file:line` comments and the verifier's error locations can be checked.
"""

from __future__ import annotations

from tests.strategies import c, call, cast, ceildiv, full_region, parallel_nest, region
from tilepy.errors import Loc
from tilepy.ir.expr import Buffer, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
    AtomicAdd,
    Breakpoint,
    Copy,
    Cumsum,
    Fill,
    For,
    ForKind,
    Gemm,
    If,
    Launch,
    Let,
    PrimFunc,
    Print,
    Reduce,
    ReduceKind,
    Store,
    While,
)
from tilepy.ir.types import Scope, bool_, dtype, float32, int32


def L(line: int, col: int = 0, file: str = "matmul.py") -> Loc:
    return Loc(file, line, col)


def tile(buf: Buffer, starts, extents):
    """Region `buf[s0:s0+e0, ...]` with constant extents."""
    return region(buf, starts, [c(e) for e in extents])


def matmul(BM=128, BN=128, BK=32, stages=3) -> PrimFunc:
    """C = A @ B, fp16 in, fp32 accumulate, fp16 out (TileLang's quick-start kernel)."""
    M, N, K = Var("M"), Var("N"), Var("K")
    A = Buffer("A", (M, K), dtype("float16"))
    B = Buffer("B", (K, N), dtype("float16"))
    C = Buffer("C", (M, N), dtype("float16"))
    bx, by, k = Var("bx"), Var("by"), Var("k")
    As = Buffer("A_shared", (c(BM), c(BK)), A.dtype, Scope.SHARED)
    Bs = Buffer("B_shared", (c(BK), c(BN)), B.dtype, Scope.SHARED)
    Cl = Buffer("C_local", (c(BM), c(BN)), float32, Scope.FRAGMENT)
    row, col = call(Op.MUL, by, c(BM)), call(Op.MUL, bx, c(BN))
    loop = For(k, c(0), ceildiv(K, BK), c(1), ForKind.PIPELINED, (
        Copy(tile(A, [row, call(Op.MUL, k, c(BK))], [BM, BK]), full_region(As), loc=L(18, 12)),
        Copy(tile(B, [call(Op.MUL, k, c(BK)), col], [BK, BN]), full_region(Bs), loc=L(19, 12)),
        Gemm(full_region(As), full_region(Bs), full_region(Cl), loc=L(20, 12)),
    ), num_stages=stages, loc=L(17, 8))
    body = (
        Alloc(As, loc=L(13, 8)), Alloc(Bs, loc=L(14, 8)), Alloc(Cl, loc=L(15, 8)),
        Fill(full_region(Cl), Const(0.0, float32), loc=L(16, 8)),
        loop,
        Copy(full_region(Cl), tile(C, [row, col], [BM, BN]), loc=L(21, 8)),
    )
    launch = Launch((ceildiv(N, BN), ceildiv(M, BM)), (bx, by), (128,), body, loc=L(12, 4))
    return PrimFunc("matmul", (A, B, C), (M, N, K), (launch,), out_idx=(2,), loc=L(11))


def copy_kernel(BM=64, BN=32) -> PrimFunc:
    """Out (bf16) = X (fp32) tile by tile through shared memory."""
    M, N = Var("M"), Var("N")
    X = Buffer("X", (M, N), float32)
    O = Buffer("O", (M, N), dtype("bfloat16"))
    bx, by = Var("bx"), Var("by")
    S = Buffer("S", (c(BM), c(BN)), float32, Scope.SHARED)
    at = [call(Op.MUL, by, c(BM)), call(Op.MUL, bx, c(BN))]
    body = (
        Alloc(S, loc=L(5, 8, "copy.py")),
        Copy(tile(X, at, [BM, BN]), full_region(S), loc=L(6, 8, "copy.py")),
        Copy(full_region(S), tile(O, at, [BM, BN]), loc=L(7, 8, "copy.py")),
    )
    launch = Launch((ceildiv(N, BN), ceildiv(M, BM)), (bx, by), (256,), body,
                    loc=L(4, 4, "copy.py"))
    return PrimFunc("copy", (X, O), (M, N), (launch,), loc=L(3, 0, "copy.py"))


def softmax_rows(BM=8, N=64) -> PrimFunc:
    """Row softmax of a (M, 64) fp16 matrix: reduce_max, exp, reduce_sum, divide."""
    M = Var("M")
    X = Buffer("X", (M, c(N)), dtype("float16"))
    Y = Buffer("Y", (M, c(N)), dtype("float16"))
    bx, i, j, i2, j2 = Var("bx"), Var("i"), Var("j"), Var("i2"), Var("j2")
    f = "softmax.py"
    xf = Buffer("x", (c(BM), c(N)), float32, Scope.FRAGMENT)
    mx = Buffer("row_max", (c(BM),), float32, Scope.FRAGMENT)
    sm = Buffer("row_sum", (c(BM),), float32, Scope.FRAGMENT)
    at = [call(Op.MUL, bx, c(BM)), c(0)]
    e = call(Op.EXP, call(Op.SUB, Load(xf, (i, j)), Load(mx, (i,))))
    body = (
        Alloc(xf, loc=L(8, 8, f)), Alloc(mx, loc=L(9, 8, f)), Alloc(sm, loc=L(10, 8, f)),
        Copy(tile(X, at, [BM, N]), full_region(xf), loc=L(11, 8, f)),
        Reduce(ReduceKind.MAX, full_region(xf), full_region(mx), 1, loc=L(12, 8, f)),
        parallel_nest((i, j), (BM, N), (Store(xf, (i, j), e, loc=L(14, 16, f)),)),
        Reduce(ReduceKind.SUM, full_region(xf), full_region(sm), 1, loc=L(15, 8, f)),
        parallel_nest((i2, j2), (BM, N), (Store(xf, (i2, j2), call(
            Op.DIV, Load(xf, (i2, j2)), Load(sm, (i2,)))),)),
        Copy(full_region(xf), tile(Y, at, [BM, N]), loc=L(18, 8, f)),
    )
    launch = Launch((ceildiv(M, BM),), (bx,), (128,), body, loc=L(7, 4, f))
    return PrimFunc("softmax", (X, Y), (M,), (launch,), out_idx=(1,), loc=L(6, 0, f))


def kitchen_sink() -> PrimFunc:
    """Every statement kind, every scope, a view, casts, literals of many dtypes."""
    N = Var("N")
    n64 = Var("n64", dtype("int64"))
    X = Buffer("X", (N,), float32)
    Xv = Buffer("X_rows", (call(Op.FLOORDIV, N, c(4)), c(4)), float32, data=X)
    O = Buffer("O", (N,), dtype("float8_e4m3fn"))
    Cnt = Buffer("Cnt", (c(1),), int32)
    bx, i, t, q = Var("bx"), Var("i"), Var("t"), Var("q", dtype("float16"))
    sh = Buffer("sh", (c(16),), float32, Scope.SHARED)
    sh2 = Buffer("sh2", (c(4), c(4)), float32, Scope.SHARED, data=sh)
    loc_ = Buffer("lo", (c(16),), dtype("float16"), Scope.LOCAL)
    v = Buffer("acc", (), float32, Scope.VAR)
    fr = Buffer("fr", (c(4),), float32, Scope.FRAGMENT)
    xi = Load(sh, (i,))
    inner = (
        Let(t, call(Op.ADD, call(Op.MUL, bx, c(16)), i), loc=L(20, 12, "k.py")),
        Store(loc_, (i,), cast(call(Op.SELECT, call(Op.AND, call(Op.GE, xi, c(-0.0, "float32")),
              call(Op.NOT, call(Op.NE, xi, xi))), call(Op.POW, xi, c(2.0, "float32")),
              call(Op.NEG, c(1.5, "float32"))), "float16"), loc=L(21, 12, "k.py")),
        Store(O, (t,), cast(Load(sh, (i,)), "float8_e4m3fn", saturate=True)),
        If(call(Op.LT, call(Op.SHL, i, c(1)), call(Op.BITXOR, t, c(-3))),
           (Print("small", (i, sh), loc=L(24, 16, "k.py")),),
           (If(call(Op.EQ, i, c(7)), (Breakpoint(loc=L(26, 16, "k.py")),)),),
           loc=L(23, 12, "k.py")),
    )
    body = (
        Alloc(sh), Alloc(sh2), Alloc(loc_), Alloc(v), Alloc(fr),
        Let(q, call(Op.ABS, c(-2.5, "float16"))),
        Copy(tile(X, [call(Op.MUL, bx, c(16))], [16]), full_region(sh)),
        Fill(full_region(v), c(float("-inf"), "float32")),
        Fill(full_region(fr), c(-0.0, "float32")),
        For(i, c(0), c(16), c(2), ForKind.SERIAL, inner, loc=L(19, 8, "k.py")),
        For(Var("u", dtype("int64")), c(0, "int64"), n64, c(1, "int64"), ForKind.UNROLLED, ()),
        While(call(Op.LT, Load(v, ()), c(0.0, "float32")),
              (Store(v, (), call(Op.ADD, Load(v, ()), c(1.0, "float32"))),)),
        Reduce(ReduceKind.ABSMAX, full_region(sh2), full_region(fr), 1, clear=False),
        Cumsum(full_region(fr), full_region(fr), 0, reverse=True),
        AtomicAdd(tile(Cnt, [c(0)], [1]), c(1)),
        AtomicAdd(tile(Xv, [bx, c(0)], [1, 4]), full_region(fr)),
        Copy(tile(sh2, [c(1), c(0)], [1, 4]), tile(X, [c(3)], [4])),
        Store(sh, (c(0),), call(Op.SIGMOID, call(Op.EXP2, cast(q, "float32")))),
        If(c(True, "bool"), (Let(Var("flag", bool_), call(Op.OR, c(True, "bool"),
                                                           c(False, "bool"))),)),
    )
    launch = Launch((call(Op.FLOORDIV, N, c(16)),), (bx,), (64, 2), body, loc=L(17, 4, "k.py"))
    return PrimFunc("kitchen_sink", (X, O, Cnt), (N, n64), (launch,), loc=L(16, 0, "k.py"))


ALL = {"matmul": matmul, "copy": copy_kernel, "softmax": softmax_rows,
       "kitchen_sink": kitchen_sink}
