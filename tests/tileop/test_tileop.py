"""@tile_op: the issue's example verbatim against the library gemm, each construct against
the direct evaluation of its index expression (bit for bit, in the interpreter), the tile
model, and the errors (file, line, caret)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy
from tests import strategies
from tests.interpreter import oracle
from tests.tileop import ops
from tilepy.ir.verify import verify
from tilepy.kernels import bias_gelu as lib_bias_gelu
from tilepy.kernels import conv2d_nhwc as lib_conv2d
from tilepy.kernels import gemm as lib_gemm
from tilepy.kernels import layernorm as lib_layernorm
from tilepy.kernels import rmsnorm as lib_rmsnorm
from tilepy.kernels import row_reduce as lib_row_reduce
from tilepy.kernels import softmax as lib_softmax
from tilepy.precision.formats import get_format
from tilepy.tileop import schedule

BF16 = get_format("bfloat16").np_dtype
RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def same(x, y) -> bool:
    """One dtype and shape, equal bits, NaN matching NaN (any payload: tests/interpreter)."""
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and oracle.same(x, y)


def test_example_verbatim_equals_the_library_gemm():
    a, b = rand(100, 70), rand(70, 90)
    c = ops.matmul(a, b)
    assert same(c, lib_gemm(in_dtype="float32")(a, b))
    assert same(c, ops.matmul.reference(a, b))
    assert not same(c, (a @ b).astype(np.float32))  # another order: not the reference


def test_contractions_become_t_gemm_with_the_library_bits():
    a, b = rand(70, 100, dtype=BF16), rand(90, 70, dtype=BF16)
    c = ops.matmul_tt(a, b)
    assert same(c, lib_gemm(in_dtype="bfloat16", trans_A=True, trans_B=True)(a, b))
    text = str(ops.matmul_tt.kernel.ir)
    assert "T.gemm(a_shared, b_shared, acc, transpose_A=True, transpose_B=True)" in text
    a, b = rand(33, 20, dtype=BF16), rand(20, 17, dtype=BF16)
    assert same(ops.matmul_bf16(a, b),
                lib_gemm(in_dtype="bfloat16", out_dtype="bfloat16")(a, b))


@pytest.mark.parametrize("name, make, lib", [
    ("softmax", lambda: (rand(19, 700),), lambda x: lib_softmax()(x)),
    ("layernorm", lambda: (rand(19, 700), rand(700), rand(700)), lambda *a: lib_layernorm()(*a)),
    ("rmsnorm", lambda: (rand(19, 1300), rand(1300)), lambda *a: lib_rmsnorm()(*a)),
    ("bias_gelu", lambda: (rand(40, 300), rand(300)),
     lambda *a: lib_bias_gelu(dtype="float32")(*a)),
    ("row_sum", lambda: (rand(40, 1100),), lambda x: lib_row_reduce()(x)),
])
def test_operators_equal_their_library_kernels(name, make, lib):
    op, args = getattr(ops, name), make()
    got = op(*args)
    assert same(got, lib(*args))
    assert same(got, op.reference(*args))


@pytest.mark.parametrize("name, make", [
    ("softmax", lambda: (rand(3, 2100),)),  # rows longer than one tile: chunked reductions
    ("row_stats", lambda: (rand(21, 1500),)),
    ("causal_relu", lambda: (rand(70, 300) * 1e4,)),
    ("matmul_bias_relu", lambda: (rand(37, 21), rand(21, 45), rand(45))),
    ("scale_rows", lambda: (rand(20, 300), rand(20, 1))),
    ("batched_scores", lambda: (rand(3, 20, 8), rand(3, 20, 8))),
    ("bias_gelu_bf16", lambda: (rand(20, 30, dtype=BF16), rand(30, dtype=BF16))),
    ("attention", lambda: tuple(rand(1, 2, 37, 8) for _ in range(3))),  # nested reductions
    ("attention", lambda: tuple(rand(1, 2, 13, 8) for _ in range(3))),  # scores once
    ("cross_entropy", lambda: (rand(13, 50), RNG.integers(0, 50, 13).astype(np.int32))),
    ("shifted_diag", lambda: (rand(20, 20),)),
])
def test_constructs_equal_the_index_expression(name, make):
    op, args = getattr(ops, name), make()
    got, want = op(*args), op.reference(*args)
    pairs = zip(got, want) if isinstance(got, tuple) else [(got, want)]
    for g, w in pairs:
        assert same(g, w)


def test_conv2d_with_index_arithmetic_equals_the_library_conv():
    x, w = rand(2, 9, 10, 5), rand(3, 3, 5, 7)
    y = ops.conv2d(x, w)  # (r, s, c) folded as one sequence: the im2col gemm's k order
    assert y.shape == (2, 7, 8, 7)
    assert same(y, lib_conv2d(2, 9, 10, 5, 7, 3, 3)(x, w))
    assert same(y, ops.conv2d.reference(x, w))


def test_element_reads_outside_the_tensor_give_zero():
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    assert list(ops.shifted_diag(x)) == [0.0, 4.0 + 1.0, 8.0 + 5.0]
    labels = np.array([2, 0], np.int32)
    x = np.array([[0.0, 0.0, 5.0], [1.0, 1.0, 1.0]], np.float32)
    want = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1) - x[[0, 1], labels]
    assert np.allclose(ops.cross_entropy(x, labels), want, rtol=0, atol=1e-6)


def test_the_reference_folds_k_ascending_and_sees_the_filter():
    x = np.array([[1e8, 1.0, -1e8, 1.0], [-3.0, -2.0, 5.0, 4.0]], np.float32)
    assert list(ops.row_sum(x)) == [1.0, 4.0]  # ((1e8 + 1) - 1e8) + 1, in float32
    hi, lo = ops.row_stats(x)
    assert list(hi) == [1e8, 5.0] and list(lo) == [1.0, 4.0]  # min over x > 0 only


def test_kernel_ir_verifies_and_names_the_users_lines():
    for op in (ops.matmul, ops.softmax, ops.row_stats, ops.batched_scores, ops.attention):
        verify(op.kernel.func)
    text = str(ops.softmax.kernel.ir)
    assert "T.reduce_max(" in text and "T.reduce_sum(" in text and "T.Parallel" in text
    assert "ops.py:" in text
    # a row that is one chunk divides the sum's chunk of exponentials instead of redoing it
    assert "if N <= 1024:" in text
    assert re.search(r"= chunk\[(i_t_\d+), j_t\] / red_1\[\1\]", text), text
    assert "v = x_tile[i_t, j_t] + b_tile[j_t]" in str(ops.bias_gelu.kernel.ir)  # one Let
    assert ops.matmul_bias_relu.tiles == {"i": 16, "j": 32, "k": 8}


def test_the_tile_model_reads_caches_and_falls_back(monkeypatch):
    c = schedule.caches()
    assert c.l1 >= 4096 and c.l2 >= c.l1
    assert schedule.gemm_tiles(4, 4, schedule.Caches(32 * 1024, 1 << 20)) == (64, 64, 32)
    assert schedule.gemm_tiles(2, 4, schedule.Caches(32 * 1024, 1 << 20)) == (64, 64, 64)
    assert schedule.gemm_tiles(4, 4, schedule.Caches(64 * 1024, 1 << 20))[0] >= 64
    schedule.caches.cache_clear()
    monkeypatch.setattr(schedule, "_SYS", "/nonexistent")
    monkeypatch.setattr(schedule.os, "sysconf", lambda name: -1)
    try:
        assert schedule.caches() == schedule.Caches(32 * 1024, 1 << 20)
    finally:
        schedule.caches.cache_clear()


@settings(max_examples=20)
@given(data=st.data())
def test_scheduled_kernels_equal_the_index_expression_on_special_values(data):
    """NaN, infinities, signed zeros, subnormals and the largest values, any shape: the
    scheduled kernels (chunked reductions, masking, gemm tiles) keep the reference's bits."""
    m, n, k = (data.draw(st.integers(1, 12)) for _ in range(3))
    x = data.draw(strategies.arrays("float32", (m, n)))
    w = data.draw(strategies.arrays("float32", (n,)))
    b = data.draw(strategies.arrays("bfloat16", (n, k)))
    a = data.draw(strategies.arrays("bfloat16", (m, n)))
    for op, args in ((ops.softmax, (x,)), (ops.row_stats, (x,)), (ops.rmsnorm, (x, w)),
                     (ops.matmul_bf16, (a, b)), (ops.causal_relu, (x,))):
        got, want = op(*args), op.reference(*args)
        for g, r in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
            assert same(g, r), op.__name__


def test_the_jit_gives_the_interpreters_bits():
    """One row kernel (chunked reductions, masks, the one-chunk branch and the other) and
    one implicit gemm (gathered tiles, matrix views), compiled once each."""
    _jit_equals_interp([(ops.softmax, (rand(9, 700),)), (ops.softmax, (rand(3, 1500),)),
                        (ops.conv2d, (rand(2, 9, 10, 5), rand(3, 3, 5, 7)))])


@pytest.mark.exhaustive  # the attention row kernel's compiles (about half a minute each)
def test_the_jit_gives_the_interpreters_bits_for_attention():
    _jit_equals_interp([(ops.attention, tuple(rand(1, 2, 13, 8) for _ in range(3)))])
    panels = ops.attention.kernel_with({"i": 8, "d": 8, "e": 8, "l": 128})
    args = tuple(rand(1, 2, 200, 8) for _ in range(3))  # two key chunks, gemms in panels
    with tilepy.backend("jit"):
        got = panels(*args)
    assert got.tobytes() == np.asarray(ops.attention.reference(*args)).tobytes()


def _jit_equals_interp(cases) -> None:
    for op, args in cases:
        want = op(*args)
        with tilepy.backend("jit"):
            got = op(*args)
        assert got.tobytes() == want.tobytes(), op.__name__


def test_the_conv_gather_divides_once_per_row_and_k_step():
    """The row digits (n, p, q) are tabled per block and the window digits (r, s, c) per k
    step: the per-element gather has no division (12-20x slower before)."""
    ir = str(ops.conv2d.kernel.ir)
    gather = [ln for ln in ir.splitlines() if "x_shared[i_t, k_t] = x[" in ln]
    assert len(gather) == 1 and "x[n, v, v_1, d2]" in gather[0]
    body = ir[ir.index("for i_t in T.Parallel(64)"):ir.index("T.copy(w_mat")]
    assert "n = n_idx[i_t]" in body and "d2 = d2_idx[k_t]" in body
    assert "//" not in body and "%" not in body


def test_the_symbolic_conv_gather_reads_unchecked_where_the_sizes_fit():
    """With symbolic sizes the gather's indices come from tables, so only its guard bounds
    them: named by lets, the guard's comparisons bound the read (the JIT's versioning), and
    each `0 <= i < size` pair is one unsigned test (both kept the gather loop scalar: 1.34x
    the library conv's time)."""
    src = ops.conv2d.kernel.source
    fast = src.split("the versioning pass's version")[1].split("\n        else:\n")[0]
    assert "x_shared[i_t, k_t] = x[np.uint64(n), np.uint64(v), np.uint64(v_1), " \
        "np.uint64(d2)]" in fast
    assert "_below(n, Nb)" in fast and "_below(d2, C)" in fast and ">= 0" not in fast


def test_softmax_reads_x_once_when_the_row_is_one_chunk():
    """The exp pass reads the max pass's copy of x (copied again only for rows longer than
    one chunk), as the library's one-pass softmax does."""
    ir = str(ops.softmax.kernel.ir)
    assert "T.exp(chunk[" in ir
    copies = [ln.strip() for ln in ir.splitlines() if "T.copy(x[" in ln]
    assert len(copies) == 3  # the max pass, the guarded one, the output's long-row branch
    assert "if N > 1024:" in ir
    # the tail masks compare the loop variable with an invariant (the JIT makes that the
    # loop's bound); the exponentials overwrite that copy of x and the output divides
    # them in place: one (rows, 1024) chunk per block, as in the library's kernel
    assert "if k_t >= N - ko * 1024:" in ir
    assert "chunk[i_t_1, k_t_1] = T.exp(chunk[i_t_1, k_t_1] - red[i_t_1])" in ir
    assert "chunk[i_t_3, j_t] = chunk[i_t_3, j_t] / red_1[i_t_3]" in ir
    assert "chunk_1" not in ir and "out_tile" not in ir


def test_a_chunk_whose_values_the_output_reads_is_not_overwritten():
    """layernorm's output reads x[i, j], which the mean pass's chunk holds: the variance
    pass computes its squares into a chunk of its own."""
    ir = str(ops.layernorm.kernel.ir)
    assert "chunk_1[" in ir and "T.copy(x[" in ir
    x, g, b = rand(5, 300), rand(300), rand(300)
    assert same(ops.layernorm(x, g, b), ops.layernorm.reference(x, g, b))


def test_attention_contracts_with_t_gemm_and_computes_the_scores_once_per_row():
    """The scores (a sum over e inside the reductions over keys) are a T.gemm per key
    chunk; the later passes reuse the first pass's scores when the keys are one chunk
    (recomputed only `if S > 16`), and the output's sum over keys is a T.gemm too whose
    probabilities operand is read from the sum's chunk (exp computed once per score)."""
    ir = str(ops.attention.kernel.ir)
    assert ir.count("T.gemm(") == 4 and ir.count("if S > 16:") == 3
    assert ir.count("T.exp(") == 2
    assert "T.reduce_sum(" in ir and ir.count("T.reduce_") == 2  # the max and the sum
    # q, k and v are copied into shared tiles in their own layout (k^T is the gemm's
    # transpose), and the sum's chunk of exponentials is the output gemm's A operand
    assert "T.gemm(q_shared, k_shared, red_1, transpose_B=True)" in ir
    assert "T.gemm(chunk_1_mat, v_shared, red_3)" in ir and "operand_shared" not in ir


def test_attention_gemms_run_in_panels_of_the_gemm_tile():
    """With the model's 256-key chunks the scores' gemm runs per 64 columns and the
    output's per 64 keys (k ascending), so each B panel stays in L1: the same bits."""
    tiles = {"i": 8, "d": 8, "e": 8, "l": 128}
    ir = str(ops.attention.kernel_with(tiles).ir)
    assert "T.gemm(q_shared, k_shared[p * 64:p * 64 + 64, 0:8], red_1[0:8, p * 64:p * 64 " \
        "+ 64], transpose_B=True)" in ir
    assert "T.gemm(chunk_1_mat[0:8, p_3 * 64:p_3 * 64 + 64], v_shared[p_3 * 64:p_3 * 64 + " \
        "64, 0:8], red_3)" in ir
    for s in (128, 200):  # one chunk of keys; two, the last one partial
        args = tuple(rand(1, 2, s, 8) for _ in range(3))
        assert same(ops.attention.kernel_with(tiles)(*args), ops.attention.reference(*args))
