"""The verifier accepts valid programs and reports each planted violation at its statement."""

from __future__ import annotations

import pytest
from hypothesis import given

from tests import strategies as S
from tests.ir import examples
from tests.ir.examples import L
from tilepy.errors import VerifyError
from tilepy.ir.expr import Buffer, Call, Load, Region, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
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
    Reduce,
    ReduceKind,
    Store,
    While,
)
from tilepy.ir.types import Scope, dtype, float32, int32
from tilepy.ir.verify import verify

c = S.c
M, N = Var("M"), Var("N")
X = Buffer("X", (M, N), float32)
Y = Buffer("Y", (M, N), dtype("float16"))
bx, by, i, j = Var("bx"), Var("by"), Var("i"), Var("j")
SH = Buffer("S", (c(8), c(8)), float32, Scope.SHARED)
FR = Buffer("F", (c(8), c(8)), float32, Scope.FRAGMENT)
HERE = L(42, 8, "bad.py")


def kernel(*stmts, top=()) -> PrimFunc:
    """A function whose one launch allocates S and F, then runs `stmts`."""
    body = (Alloc(SH), Alloc(FR), *stmts)
    launch = Launch((c(4), c(4)), (bx, by), (128,), body, loc=L(3, 4, "bad.py"))
    return PrimFunc("k", (X, Y), (M, N), (*top, launch), loc=L(1, 0, "bad.py"))


def x_tile(extents=(8, 8)) -> Region:
    return S.region(X, [S.call(Op.MUL, by, c(8)), S.call(Op.MUL, bx, c(8))],
                    [c(e) for e in extents])


def fails(func: PrimFunc, *fragments: str, loc=HERE) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(func)
    err = info.value
    for frag in fragments:
        assert frag in err.message
    assert err.loc == loc
    assert "verify" not in str(err) and "_Verifier" not in str(err)
    return err


# ---------------------------------------------------------------- accepted


@pytest.mark.parametrize("name", sorted(examples.ALL))
def test_examples_verify(name):
    verify(examples.ALL[name]())


@given(S.programs())
def test_generated_programs_verify(f):
    verify(f)


def test_baseline_kernel_verifies():
    verify(kernel(Copy(x_tile(), full_region(SH), loc=HERE)))


# ---------------------------------------------------------------- planted violations


def test_unbound_var():
    z = Var("z")
    fails(kernel(Store(FR, (z, c(0)), c(1.0, "float32"), loc=HERE)), "z is used but not bound")


def test_loop_var_bound_twice():
    loop = lambda loc: For(i, c(0), c(8), c(1), ForKind.SERIAL, (), loc=loc)  # noqa: E731
    fails(kernel(loop(L(5)), loop(HERE)), "'i' is bound twice")


def test_let_shadowing_a_size():
    fails(kernel(Let(Var("M"), c(3), loc=HERE)), "'M' is bound twice")


def test_var_used_with_another_dtype():
    wrong = Var("bx", dtype("int64"))
    fails(kernel(Store(FR, (wrong, c(0)), c(1.0, "float32"), loc=HERE)),
          "bx is bound as int32 but used as int64")


def test_call_dtype_disagrees_with_type_rule():
    x = Load(FR, (c(0), c(0)))
    bad = Call(Op.ADD, (x, x), dtype("float16"))
    fails(kernel(Store(FR, (c(0), c(0)), bad, loc=HERE)), "gives float32", "says float16")


def test_call_operands_break_type_rule():
    bad = Call(Op.ADD, (Load(FR, (c(0), c(0))), c(1)), float32)
    fails(kernel(Store(FR, (c(0), c(0)), bad, loc=HERE)), "int32")


def test_call_loc_is_preferred_when_known():
    at = L(50, 20, "bad.py")
    bad = Call(Op.EXP, (c(1),), int32, loc=at)
    fails(kernel(Store(FR, (c(0), c(0)), bad, loc=HERE)), "float", loc=at)


def test_reinterpret_needs_equal_widths():
    bad = Call(Op.REINTERPRET, (Load(FR, (c(0), c(0))),), dtype("uint16"))
    fails(kernel(Store(FR, (c(0), c(0)), c(0.0, "float32"), loc=L(9)),
                 Let(Var("r", dtype("uint16")), bad, loc=HERE)), "equal widths")


def test_load_index_count():
    fails(kernel(Store(FR, (c(0), c(0)), Load(SH, (c(0),)), loc=HERE)),
          "S has 2 dimension(s)", "indexed with 1")


def test_store_index_count():
    fails(kernel(Store(FR, (c(0),), c(0.0, "float32"), loc=HERE)), "indexed with 1")


def test_float_index():
    fails(kernel(Store(FR, (c(0), c(1.0, "float32")), c(0.0, "float32"), loc=HERE)),
          "an index of F must be an integer; got float32")


def test_region_rank():
    bad = Region(SH, (c(0),), (c(8),))
    fails(kernel(Fill(bad, c(0.0, "float32"), loc=HERE)), "needs 2 dimension(s)")


def test_copy_shapes_differ():
    fails(kernel(Copy(x_tile((8, 4)), full_region(SH), loc=HERE)), "T.copy shapes differ",
          "(8, 4)", "(8, 8)")


def test_copy_unit_dims_are_dropped():
    row = Buffer("R", (c(8),), float32, Scope.FRAGMENT)
    verify(kernel(Alloc(row), Copy(x_tile((1, 8)), full_region(row), loc=HERE)))


def _gemm_kernel(a_shape, b_shape, c_shape, ta=False, tb=False):
    A = Buffer("A_s", tuple(map(c, a_shape)), float32, Scope.SHARED)
    B = Buffer("B_s", tuple(map(c, b_shape)), float32, Scope.SHARED)
    C = Buffer("C_f", tuple(map(c, c_shape)), float32, Scope.FRAGMENT)
    g = Gemm(full_region(A), full_region(B), full_region(C), ta, tb, loc=HERE)
    return kernel(Alloc(A), Alloc(B), Alloc(C), g)


def test_gemm_shapes():
    verify(_gemm_kernel((8, 4), (4, 16), (8, 16)))
    verify(_gemm_kernel((4, 8), (16, 4), (8, 16), ta=True, tb=True))
    fails(_gemm_kernel((8, 4), (8, 16), (8, 16)), "T.gemm shapes do not agree")
    fails(_gemm_kernel((8, 4), (4, 16), (8, 16), tb=True), "(transposed)")
    fails(_gemm_kernel((8, 4), (4, 16), (16, 8)), "C (16, 8)")


def test_gemm_operands_are_2d():
    fails(_gemm_kernel((8, 4, 1), (4, 16), (8, 16)), "2-d", "A_s has 3")


def test_reduce_dim_and_shape():
    r1 = Buffer("r1", (c(8),), float32, Scope.FRAGMENT)
    r2 = Buffer("r2", (c(8), c(1)), float32, Scope.FRAGMENT)
    red = lambda dst, dim: Reduce(ReduceKind.SUM, full_region(FR), full_region(dst), dim,  # noqa
                                  loc=HERE)
    verify(kernel(Alloc(r1), Alloc(r2), red(r1, 1), red(r2, 1), red(r1, 0)))
    fails(kernel(Alloc(r1), red(r1, 2)), "dim=2 is out of range")
    fails(kernel(Alloc(r1), red(r1, -1)), "out of range")
    fails(kernel(red(SH, 1)), "gives (8,) (or (8, 1))", "destination is (8, 8)")


def test_cumsum_shapes():
    r1 = Buffer("r1", (c(8),), float32, Scope.FRAGMENT)
    fails(kernel(Alloc(r1), Cumsum(full_region(FR), full_region(r1), 0, loc=HERE)),
          "needs src and dst of one shape")


def test_alloc_outside_launch():
    f = kernel(top=(Alloc(Buffer("T0", (c(4),), float32, Scope.SHARED), loc=HERE),))
    fails(f, "an allocation outside a T.Kernel block")


def test_store_outside_launch():
    f = kernel(top=(Store(X, (c(0), c(0)), c(1.0, "float32"), loc=HERE),))
    fails(f, "a store outside a T.Kernel block")


def test_alloc_global_scope():
    fails(kernel(Alloc(Buffer("G", (c(4),), float32), loc=HERE)), "allocated in global memory")


def test_nested_launch():
    inner = Launch((c(1),), (Var("b2"),), (1,), (), loc=HERE)
    fails(kernel(inner), "T.Kernel inside another T.Kernel")


def test_global_not_a_param():
    G = Buffer("G", (c(4),), float32)
    fails(kernel(Fill(full_region(G), c(0.0, "float32"), loc=HERE)),
          "buffer G is not declared here")


def test_undeclared_shared_buffer():
    T0 = Buffer("T0", (c(4),), float32, Scope.SHARED)
    err = fails(kernel(Fill(full_region(T0), c(0.0, "float32"), loc=HERE)), "T0 is not declared")
    assert "alloc" in err.hint


def test_buffer_used_with_other_shape():
    other = Buffer("S", (c(4), c(8)), float32, Scope.SHARED)
    fails(kernel(Fill(full_region(other), c(0.0, "float32"), loc=HERE)),
          "used as float32(4, 8)", "declared as float32(8, 8)")


def test_view_of_param_is_allowed_and_checked():
    v = Buffer("Xv", (S.call(Op.MUL, M, N),), float32, data=X)
    verify(kernel(Fill(S.region(v, [c(0)], [c(4)]), c(0.0, "float32"), loc=HERE)))
    bad = Buffer("Xh", (c(4),), dtype("float16"), data=X)
    fails(kernel(Fill(full_region(bad), c(0.0, "float16"), loc=HERE)), "view Xh")


def test_conditions_must_be_bool():
    fails(kernel(If(c(1), (), loc=HERE)), "an if condition must be bool; got int32")
    fails(kernel(While(Load(FR, (c(0), c(0))), (), loc=HERE)), "a while condition")


def test_let_dtype_mismatch():
    fails(kernel(Let(Var("t", dtype("int64")), c(3), loc=HERE)),
          "t is declared int64 but bound to a int32 value")


def test_loop_bounds_integer():
    fails(kernel(For(i, c(0), c(8.0, "float32"), c(1), ForKind.SERIAL, (), loc=HERE)),
          "the loop stop must be an integer")


def test_launch_grid_and_vars():
    bad = Launch((c(4), c(4)), (bx,), (128,), (), loc=HERE)
    fails(PrimFunc("k", (X,), (M, N), (bad,)), "one block variable per extent")


def test_out_idx_range():
    f = kernel()
    fails(PrimFunc(f.name, f.params, f.sizes, f.body, (2,), loc=f.loc), "out_idx [2]",
          loc=f.loc)
    verify(PrimFunc(f.name, f.params, f.sizes, f.body, (-1,), loc=f.loc))


def test_param_shape_uses_unbound_size():
    K = Var("K")
    f = PrimFunc("k", (Buffer("A", (K,), float32),), (), (), loc=L(1))
    fails(f, "K is used but not bound", loc=L(1))


def test_invalid_name():
    fails(kernel(Let(Var("not ok"), c(1), loc=HERE)), "not a valid name")


@pytest.mark.parametrize("value,dt", [(0.1, "float16"), (300, "int8"), (-1, "uint8"),
                                      (2**63, "int64"), (2**64, "uint64"), (8, "int4"),
                                      (float("inf"), "float8_e4m3fn"), (1e-50, "float32")])
def test_unrepresentable_literal(value, dt):
    lit = S.Const(value, dtype(dt))
    fails(kernel(Let(Var("t", dtype(dt)), lit, loc=HERE)), f"is not a {dt} value")


@pytest.mark.parametrize("value,dt", [(0.099975586, "float16"), (float("nan"), "float32"),
                                      (-0.0, "bfloat16"), (448.0, "float8_e4m3fn"),
                                      (-128, "int8"), (2**63 - 1, "int64"),
                                      (2**64 - 1, "uint64"), (-8, "int4")])
def test_representable_literal(value, dt):
    lit = S.Const(S.representable(value, dtype(dt)) if dtype(dt).is_float else value, dtype(dt))
    verify(kernel(Let(Var("t", dtype(dt)), lit, loc=HERE)))
