"""Flop and byte counts against numbers worked out by hand from the programs' shapes."""

from __future__ import annotations

import pytest

from tests import strategies as S
from tests.ir import examples
from tests.ir.examples import L
from tilepy.ir.analysis import count
from tilepy.ir.expr import Buffer, Load, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Alloc, Copy, For, ForKind, Gemm, If, Launch, PrimFunc, Store, While
from tilepy.ir.types import Scope, dtype, float32

c = S.c


def test_matmul_counts():
    # 128x128x32 tiles, fp16 A/B/C, fp32 accumulator; M = N = 256, K = 64:
    # grid 2 x 2 = 4 blocks, 2 k-steps per block.
    n = count(examples.matmul(), {"M": 256, "N": 256, "K": 64})
    assert n.gemm_flops == 2 * 256 * 256 * 64 == 8_388_608
    assert n.flops == n.gemm_flops  # no float elementwise ops in this kernel
    a_tile, b_tile = 128 * 32 * 2, 32 * 128 * 2  # fp16 bytes per k-step
    assert n.global_read == 4 * 2 * (a_tile + b_tile) == 131_072
    assert n.global_written == 256 * 256 * 2
    assert n.bytes_written["shared"] == n.bytes_read["shared"] == 4 * 2 * (a_tile + b_tile)
    acc = 128 * 128 * 4  # the fp32 accumulator tile
    # clear, 2 gemm read-modify-writes, the final copy out: per block
    assert n.bytes_written["fragment"] == 4 * (acc + 2 * acc)
    assert n.bytes_read["fragment"] == 4 * (2 * acc + acc)
    assert n.ops == {"convert": 256 * 256}  # fp32 -> fp16 on the way out
    assert n.exact


def test_matmul_edge_tiles_count_full_tiles():
    full = count(examples.matmul(), {"M": 256, "N": 256, "K": 64})
    ragged = count(examples.matmul(), {"M": 200, "N": 129, "K": 40})
    assert ragged == full  # ceil(200/128) = ceil(129/128) = 2 blocks, ceil(40/32) = 2 steps


def test_copy_counts():
    # 64x32 tiles, fp32 in, bf16 out, through shared; M = 128, N = 64: 2 x 2 blocks.
    n = count(examples.copy_kernel(), {"M": 128, "N": 64})
    assert n.global_read == 128 * 64 * 4 == 32_768
    assert n.global_written == 128 * 64 * 2 == 16_384
    assert n.bytes_read["shared"] == n.bytes_written["shared"] == 128 * 64 * 4
    assert n.ops == {"convert": 128 * 64}
    assert n.flops == 0 and n.exact


def test_softmax_counts():
    # 8 rows per block, 64 columns, M = 16: 2 blocks.
    n = count(examples.softmax_rows(), {"M": 16})
    elems = 16 * 64
    assert n.ops["transcendental"] == elems  # one exp per element
    assert n.ops["float"] == 2 * elems  # the subtraction and the division
    assert n.ops["reduce"] == 2 * elems  # reduce_max and reduce_sum read every element
    assert n.flops == 5 * elems
    assert n.global_read == n.global_written == elems * 2
    assert n.ops["convert"] == 2 * elems


def _triangle(stmt_in_loop) -> PrimFunc:
    """for k in range(bx + 1): <stmt>, over a grid of 4 blocks."""
    bx, k = Var("bx"), Var("k")
    buf = Buffer("A", (c(64),), float32)
    loop = For(k, c(0), S.call(Op.ADD, bx, c(1)), c(1), ForKind.SERIAL, (stmt_in_loop(buf, k),))
    return PrimFunc("tri", (buf,), (), (Launch((c(4),), (bx,), (1,), (loop,)),))


def test_loop_bound_depending_on_block_var_is_evaluated_per_block():
    f = _triangle(lambda buf, k: Store(buf, (k,), c(1.0, "float32")))
    n = count(f, {})
    assert n.bytes_written["global"] == (1 + 2 + 3 + 4) * 4
    assert n.exact


def test_nested_dependent_loops():
    bx, i, j = Var("bx"), Var("i"), Var("j")
    buf = Buffer("A", (c(8), c(8)), float32)
    inner = For(j, c(0), i, c(1), ForKind.SERIAL, (Store(buf, (i, j), c(0.0, "float32")),))
    outer = For(i, c(0), S.call(Op.ADD, bx, c(2)), c(1), ForKind.SERIAL, (inner,))
    f = PrimFunc("t", (buf,), (), (Launch((c(3),), (bx,), (1,), (outer,)),))
    # block b: sum_{i < b + 2} i stores = (b+2)(b+1)/2 -> 1 + 3 + 6
    assert count(f, {}).bytes_written["global"] == (1 + 3 + 6) * 4


def test_step_and_empty_loops():
    bx, k = Var("bx"), Var("k")
    buf = Buffer("A", (c(64),), float32)
    st = Store(buf, (k,), c(1.0, "float32"))
    loops = (For(k, c(3), c(20), c(4), ForKind.SERIAL, (st,)),  # 3, 7, 11, 15, 19
             For(Var("e"), c(5), c(5), c(1), ForKind.SERIAL, (st,)))
    f = PrimFunc("t", (buf,), (), (Launch((c(2),), (bx,), (1,), loops),))
    assert count(f, {}).bytes_written["global"] == 2 * 5 * 4


def test_data_dependent_if_counts_larger_branch_and_is_flagged():
    bx = Var("bx")
    buf = Buffer("A", (c(8),), float32)
    cond = S.call(Op.GT, Load(buf, (c(0),)), c(0.0, "float32"))
    one = Store(buf, (c(1),), c(1.0, "float32"))
    branch = If(cond, (one, one, one), (one,), loc=L(7, 4, "k.py"))
    f = PrimFunc("t", (buf,), (), (Launch((c(2),), (bx,), (1,), (branch,)),))
    n = count(f, {})
    assert n.bytes_written["global"] == 2 * 3 * 4
    assert n.bytes_read["global"] == 2 * 4  # the condition's load
    assert n.ops["compare"] == 2
    assert not n.exact and "k.py:7" in n.notes[0]


def test_if_on_block_var_takes_the_right_branch():
    bx = Var("bx")
    buf = Buffer("A", (c(8),), float32)
    one = Store(buf, (c(1),), c(1.0, "float32"))
    branch = If(S.call(Op.EQ, bx, c(0)), (one, one, one), (one,))
    f = PrimFunc("t", (buf,), (), (Launch((c(5),), (bx,), (1,), (branch,)),))
    assert count(f, {}).bytes_written["global"] == (3 + 4 * 1) * 4


def test_while_is_flagged():
    v = Buffer("v", (), float32, Scope.VAR)
    loop = While(S.call(Op.LT, Load(v, ()), c(3.0, "float32")),
                 (Store(v, (), c(9.0, "float32")),))
    f = PrimFunc("t", (), (), (Launch((c(1),), (Var("bx"),), (1,), (Alloc(v), loop)),))
    n = count(f, {})
    assert not n.exact and n.bytes_written["var"] == 4


def test_gemm_transposes_and_clear_accum():
    A = Buffer("A_s", (c(4), c(8)), float32, Scope.SHARED)  # K x M, transposed
    B = Buffer("B_s", (c(16), c(4)), dtype("float16"), Scope.SHARED)  # N x K, transposed
    C = Buffer("C_f", (c(8), c(16)), float32, Scope.FRAGMENT)
    g = Gemm(full_region(A), full_region(B), full_region(C), True, True, clear_accum=True)
    body = (Alloc(A), Alloc(B), Alloc(C), g)
    n = count(PrimFunc("g", (), (), (Launch((c(3),), (Var("bx"),), (1,), body),)), {})
    assert n.gemm_flops == 3 * 2 * 8 * 16 * 4
    assert n.bytes_read == {"shared": 3 * (8 * 4 * 4 + 4 * 16 * 2)}  # C not read: cleared
    assert n.bytes_written == {"fragment": 3 * 8 * 16 * 4}


def test_missing_size_is_reported():
    with pytest.raises(ValueError, match="missing K"):
        count(examples.matmul(), {"M": 1, "N": 1})


def test_copy_between_same_dtypes_converts_nothing():
    X = Buffer("X", (c(8),), float32)
    S_ = Buffer("S", (c(8),), float32, Scope.SHARED)
    body = (Alloc(S_), Copy(full_region(X), full_region(S_)))
    n = count(PrimFunc("c", (X,), (), (Launch((c(2),), (Var("bx"),), (1,), body),)), {})
    assert n.ops == {} and n.global_read == 2 * 32
