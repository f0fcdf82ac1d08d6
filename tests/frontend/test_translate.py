"""The front end builds the IR the kernel says, and its errors point at the user's line."""

import os

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tests.frontend import bad_kernels, kernels
from tilepy.errors import ArgumentError, TileSyntaxError, TileTypeError
from tilepy.ir import (
    Alloc,
    Const,
    Copy,
    Fill,
    For,
    ForKind,
    Gemm,
    If,
    Launch,
    Let,
    Load,
    Op,
    Reduce,
    Scope,
    Store,
    Var,
    walk,
)
from tilepy.kernel import bind_arguments

BAD = os.path.abspath(bad_kernels.__file__)


def _stmts(kernel, kind):
    return [s for s in walk(kernel.func.body) if isinstance(s, kind)]


def _ints(exprs):
    return tuple(e.value if isinstance(e, Const) else e for e in exprs)


def test_lazy_gemm_structure():
    k = kernels.matmul(256, 192, 128, 64, 64, 32)
    f = k.func
    assert [p.name for p in f.params] == ["A", "B", "C"] and f.out_idx == (2,)
    assert _ints(f.params[0].shape) == (256, 128) and str(f.params[0].dtype) == "float16"
    (launch,) = _stmts(k, Launch)
    assert _ints(launch.grid) == (3, 4) and launch.threads == (128,)
    allocs = {a.buffer.name: a.buffer for a in _stmts(k, Alloc)}
    assert allocs["C_local"].scope is Scope.FRAGMENT and str(allocs["C_local"].dtype) == "float32"
    (loop,) = _stmts(k, For)
    assert loop.kind is ForKind.PIPELINED and loop.num_stages == 3 and _ints([loop.stop]) == (4,)
    copies = _stmts(k, Copy)
    assert _ints(copies[0].src.extents) == (64, 32)  # start point sized by A_shared
    assert _ints(copies[1].src.extents) == (32, 64)
    assert _ints(copies[2].dst.extents) == (64, 64)
    (gemm,) = _stmts(k, Gemm)
    assert gemm.c.buffer.name == "C_local" and not gemm.transpose_a
    (fill,) = _stmts(k, Fill)
    assert fill.value == Const(0.0, fill.dst.dtype)


def test_lazy_factory_caches_per_arguments():
    a = kernels.matmul(128, 128, 128, 64, 64, 32)
    assert kernels.matmul(128, 128, 128, 64, 64, 32) is a
    assert kernels.matmul(256, 128, 128, 64, 64, 32) is not a


def test_eager_softmax_structure():
    k = kernels.softmax.build(None, block=64)
    f = k.func
    assert [v.name for v in f.sizes] == ["M", "N"]
    assert [p.name for p in f.params] == ["X", "Y"] and f.out_idx == (1,)
    (launch,) = _stmts(k, Launch)
    assert launch.grid == (Var("M"),)
    first_copy = _stmts(k, Copy)[0]
    assert _ints(first_copy.src.extents) == (1, 64)  # a 1-d tile aligned to the 2-d source
    reduces = _stmts(k, Reduce)
    assert [r.kind.value for r in reduces] == ["max", "sum"] and reduces[0].dim == 0
    loops = _stmts(k, For)
    assert all(lp.kind is ForKind.PARALLEL for lp in loops)
    assert len({lp.var.name for lp in loops}) == 2  # the second `i` is renamed
    assert kernels.softmax.build(None, block=64) is k


def test_symbolic_slices_lets_and_literals():
    f = kernels.scale_rows.func
    assert f.sizes == (Var("M"),)
    copy = _stmts(kernels.scale_rows, Copy)[0]
    assert _ints(copy.src.extents) == (16, Var("M")) or _ints(copy.src.extents)[0] == 16
    outer, inner = _stmts(kernels.scale_rows, For)
    assert outer.kind is inner.kind is ForKind.PARALLEL
    (let,) = _stmts(kernels.scale_rows, Let)
    assert let.value.op is Op.MUL and str(let.value.dtype) == "bfloat16"
    lit = let.value.args[1]
    assert lit.value == float(np.float64(0.1).astype(ml_dtypes.bfloat16))  # rounded once
    (branch,) = _stmts(kernels.scale_rows, If)
    assert branch.cond.op is Op.LT


def test_slice_extent_is_folded():
    copy = _stmts(kernels.scale_rows, Copy)[0]
    assert copy.src.extents[0] == Const(16, copy.src.extents[0].dtype)
    assert copy.src.extents[1] == Const(64, copy.src.extents[1].dtype)


def test_alloc_var_macro_and_build_time_if():
    k = kernels.counter
    stores = _stmts(k, Store)
    var_stores = [s for s in stores if s.buffer.scope is Scope.VAR]
    assert len(var_stores) == 2  # init and `acc += t[i]`
    update = var_stores[1].value
    assert update.op is Op.ADD and isinstance(update.args[0], Load)
    macro_stores = [s for s in stores if s.buffer.name == "t"]
    assert len(macro_stores) == 1 and macro_stores[0].value.op is Op.ADD
    y = [s for s in stores if s.buffer.name == "Y"]
    assert len(y) == 1 and isinstance(y[0].value, Load)  # the build-time `if` kept one arm


def _line_of(text: str) -> int:
    with open(BAD) as f:
        lines = [i for i, line in enumerate(f, 1) if text in line]
    assert len(lines) == 1, text
    return lines[0]


def _error_at(fn, marker, kind, *words):
    with pytest.raises(kind) as info:
        fn()
    msg = str(info.value)
    assert f"{BAD}:{_line_of(marker)}:" in msg, msg
    for w in words:
        assert w in msg, msg
    assert "tilepy/frontend" not in msg and "_e_" not in msg
    return msg


def test_error_lines_and_messages():
    msg = _error_at(bad_kernels.undefined_name, "missing + 1", TileSyntaxError, "'missing'")
    assert "    A[0] = missing + 1" in msg and "\n           ^" in msg  # caret under `missing`
    _error_at(bad_kernels.gemm_shapes, "T.gemm(a, b, c)", TileTypeError, "(64, 32)",
              "(16, 64)", "hint:")
    _error_at(bad_kernels.copy_shapes, "T.copy(A[0:16", TileTypeError, "(16, 32)", "(32, 32)")
    _error_at(bad_kernels.reassign_in_loop, "acc = acc + A[i]", TileTypeError, "T.alloc_var")
    _error_at(bad_kernels.int_division, "A[1] / A[2]", TileTypeError, "'//'")
    _error_at(bad_kernels.copy_outside_kernel, "T.copy(A, B)", TileSyntaxError, "T.Kernel")
    _error_at(bad_kernels.wrong_rank, "A[0] = 1.0", TileTypeError, "2 dimension(s)",
              "1 index")


def test_argument_errors_name_the_callers_line():
    k = kernels.matmul(64, 64, 64, 32, 32, 32)
    a = np.zeros((64, 64), np.float16)
    with pytest.raises(ArgumentError) as info:
        bind_arguments(k.func, (a, a.astype(np.float32)), tilepy.kernel._caller_loc())
    assert "expected dtype float16; got float32" in str(info.value)
    assert f"{os.path.abspath(__file__)}:" in str(info.value)
    with pytest.raises(ArgumentError, match=r"expected shape \(64, 64\); got \(64, 32\)"):
        bind_arguments(k.func, (a, a[:, :32].copy()), tilepy.kernel._caller_loc())
    with pytest.raises(ArgumentError, match="C-contiguous"):
        bind_arguments(k.func, (a, a.T), tilepy.kernel._caller_loc())
    with pytest.raises(ArgumentError, match="takes 2 array"):
        bind_arguments(k.func, (a,), tilepy.kernel._caller_loc())


def test_symbolic_sizes_bind_consistently():
    s = kernels.softmax.build(None, block=64)
    x = np.zeros((5, 64), np.float32)
    arrays, sizes = bind_arguments(s.func, (x,), tilepy.kernel._caller_loc())
    assert sizes == {"M": 5, "N": 64} and arrays["Y"].shape == (5, 64)
    f = kernels.scale_rows.func
    with pytest.raises(ArgumentError, match="earlier argument bound M = 3"):
        bind_arguments(f, (np.zeros((3, 64), ml_dtypes.bfloat16),
                           np.zeros((4, 64), ml_dtypes.bfloat16)), tilepy.kernel._caller_loc())


@pytest.mark.parametrize("loop", [T.serial, T.Parallel, T.Pipelined, T.unroll, range],
                         ids=["serial", "Parallel", "Pipelined", "unroll", "range"])
def test_literal_started_accumulator_is_an_error_in_every_loop(loop):
    _error_at(lambda: bad_kernels.literal_accumulator(loop), "# literal accumulator",
              TileTypeError, "'s' was bound outside this loop", "T.alloc_var", "T.alloc_local")


def test_augmented_and_while_accumulators_are_errors():
    _error_at(bad_kernels.literal_augmented_accumulator, "# augmented accumulator",
              TileTypeError, "'s' was bound outside this loop", "T.alloc_var")
    _error_at(bad_kernels.literal_counter_in_while, "# while counter", TileTypeError,
              "'n' was bound outside this loop", "T.alloc_var")


@pytest.mark.parametrize("start_literal", [True, False])
def test_reading_a_name_rebound_in_a_branch_is_an_error(start_literal):
    msg = _error_at(lambda: bad_kernels.rebound_in_branch(start_literal),
                    "# read after the branch", TileTypeError, "'s' was reassigned inside the if",
                    "T.alloc_var")
    assert f"at line {_line_of('# the runtime branch')}" in msg
