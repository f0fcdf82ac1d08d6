"""Op graphs: tilepy.compile(fn) traces tile ops, fuses element-wise epilogues into their
producer, and gives interp(unfused) == interp(fused) == jit(fused), bit for bit."""

import os

import numpy as np

import tilepy
from tests.tileop import ops
from tilepy.ir.verify import verify
from tilepy.precision.formats import get_format
from tilepy.tileop import schedule

BF16 = get_format("bfloat16").np_dtype
RNG = np.random.default_rng(3)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def mlp(x, w1, b1, w2):
    return ops.matmul(ops.bias_gelu(ops.matmul(x, w1), b1), w2)


def mlp_bf16(x, w1, b1):
    return ops.bias_gelu_bf16(ops.matmul_bf16(x, w1), b1)


def norm_then_gelu(x, g, b, b2):
    return ops.bias_gelu(ops.layernorm(x, g, b), b2), ops.softmax(x)


def gemm_bias_gelu(x, w1, b1):
    return ops.bias_gelu(ops.matmul(x, w1), b1)


def test_gemm_bias_gelu_becomes_one_kernel_with_the_same_bits():
    args = (rand(70, 48), rand(48, 100), rand(100))
    fused = tilepy.compile(gemm_bias_gelu)
    unfused = tilepy.compile(gemm_bias_gelu, fuse=False)
    g = fused.trace(*args)
    assert [n.op.__name__ for n in g.nodes] == ["matmul_bias_gelu"]
    assert len(unfused.trace(*args).nodes) == 2
    k = g.nodes[0].op.kernel
    verify(k.func)
    assert "T.gemm(" in str(k.ir) and "T.tanh(" in str(k.ir)
    want = unfused(*args)
    assert np.array_equal(fused(*args), want)
    with tilepy.backend("jit"):
        got = fused(*args)
    assert got.tobytes() == want.tobytes()


def test_mlp_block_becomes_one_back_to_back_kernel_with_the_same_bits():
    """gemm + bias + GELU + gemm: one kernel, the intermediate in a block-local tile; rows,
    the hidden size and the output columns all have partial tiles."""
    args = (rand(70, 48), rand(48, 100), rand(100), rand(100, 30))
    fused, unfused = tilepy.compile(mlp), tilepy.compile(mlp, fuse=False)
    g = fused.trace(*args)
    assert [n.op.__name__ for n in g.nodes] == ["matmul_bias_gelu_matmul"]
    assert len(unfused.trace(*args).nodes) == 3
    op = g.nodes[0].op
    verify(op.kernel.func)
    ir = str(op.kernel.ir)
    assert ir.count("T.gemm(") == 2 and "T.tanh(" in ir and ir.count("T.Kernel(") == 1
    # no global buffer of the (tokens x hidden) intermediate: only the inputs and out
    assert [b.shape for b in op.kernel.func.params].count(op.kernel.func.params[1].shape) == 1
    want = unfused(*args)
    assert fused(*args).tobytes() == want.tobytes()
    assert op.reference(*[args[n] for n in (3, 0, 1, 2)]).tobytes() == want.tobytes()
    with tilepy.backend("jit"):
        got = fused(*args)
    assert got.tobytes() == want.tobytes()


def test_back_to_back_chunks_padded_past_the_hidden_size_keep_the_bits():
    """96 hidden units: the unfused gemm (k tile 32) pads nothing, the fused op's 64-wide
    chunks pad 32 columns with +0 products. A row whose GELU outputs are all -0.0 still
    sums to +0.0 both ways: a sum starts from +0.0, which adding -0.0 or +0.0 keeps."""
    x, w1, w2 = rand(8, 16), rand(16, 96), np.abs(rand(96, 8))
    x[0] = 0.0
    b1 = np.full(96, -20.0, np.float32)  # x[0] @ w1 + b1 far below 0: gelu gives -0.0
    args = (x, w1, b1, w2)
    g = tilepy.compile(mlp).trace(*args)
    assert g.nodes[0].op.tiles["k"] == 64
    want = tilepy.compile(mlp, fuse=False)(*args)
    gelu = ops.bias_gelu(x @ w1, b1)
    assert np.signbit(gelu[0]).all() and (gelu[0] == 0).all()
    assert (want[0] == 0).all() and not np.signbit(want[0]).any()
    assert tilepy.compile(mlp)(*args).tobytes() == want.tobytes()


def test_a_tile_op_written_as_back_to_back_gemms_is_one_launch():
    """The MLP block written as one tile op: the same lowering, with 16-column blocks
    (each recomputes the intermediate's chunks), equal to its index expression and to
    the graph of three ops."""
    args = (rand(20, 24), rand(24, 40), rand(40), rand(40, 40))
    ir = str(ops.mlp_block.kernel.ir)
    assert ir.count("T.gemm(") == 2 and ir.count("T.Kernel((N + 15) // 16") == 1
    got = ops.mlp_block(*args)
    assert got.tobytes() == ops.mlp_block.reference(*args).tobytes()
    assert got.tobytes() == tilepy.compile(mlp, fuse=False)(*args).tobytes()


def test_back_to_back_rows_per_block_grow_with_the_rows():
    """64 rows per block; up to 256 where each core still gets 4 row blocks (traced on
    arrays that take no memory)."""
    def zeros(*shape):
        return np.broadcast_to(np.float32(0), shape)

    def rows_tile(tokens):
        args = (zeros(tokens, 16), zeros(16, 24), zeros(24), zeros(24, 8))
        return tilepy.compile(mlp).trace(*args).nodes[0].op.tiles["i"]

    cores = os.cpu_count() or 1
    assert rows_tile(512) == 64 or cores == 1
    assert rows_tile(64 * 8 * cores - 1) == 64
    assert rows_tile(256 * 4 * cores) == 256


def mlp_two_uses(x, w1, b1, w2):
    h = ops.bias_gelu(ops.matmul(x, w1), b1)
    return ops.matmul(h, w2), ops.row_sum(h)


def mlp_returns_h(x, w1, b1, w2):
    h = ops.bias_gelu(ops.matmul(x, w1), b1)
    return ops.matmul(h, w2), h


def mlp_as_b(x, w1, b1, w2):
    return ops.matmul(w2, ops.bias_gelu(ops.matmul(x, w1), b1))


def test_back_to_back_fusion_is_refused_where_it_cannot_apply():
    args = (rand(8, 16), rand(16, 24), rand(24), rand(24, 8))
    for fn in (mlp_two_uses, mlp_returns_h):  # the intermediate is needed in memory
        names = [n.op.__name__ for n in tilepy.compile(fn).trace(*args).nodes]
        assert names[:2] == ["matmul_bias_gelu", "matmul"], fn.__name__
    b_args = (rand(8, 16), rand(16, 24), rand(24), rand(24, 8))
    names = [n.op.__name__ for n in tilepy.compile(mlp_as_b).trace(*b_args).nodes]
    assert names == ["matmul_bias_gelu", "matmul"]  # the intermediate as B: not fused
    # output columns wider than one block's budget (arrays that take no memory)
    wide = schedule.caches().l2 // 8
    big = (np.broadcast_to(np.float32(0), (8, 16)), np.broadcast_to(np.float32(0), (16, 24)),
           np.broadcast_to(np.float32(0), (24,)), np.broadcast_to(np.float32(0), (24, wide)))
    names = [n.op.__name__ for n in tilepy.compile(mlp).trace(*big).nodes]
    assert names == ["matmul_bias_gelu", "matmul"]


def sum_of_products(a, b, c, d):
    return ops.add(ops.matmul(a, b), ops.matmul(c, d))


def test_an_epilogue_with_a_later_producers_input_runs_after_it():
    """add(a @ b, c @ d): the add folds into the first gemm, whose fused node reads the
    second gemm's output, so it takes the add's place in the order (it took the first
    gemm's, before the value it reads existed)."""
    args = (rand(12, 20), rand(20, 16), rand(12, 9), rand(9, 16))
    fused, unfused = tilepy.compile(sum_of_products), tilepy.compile(sum_of_products,
                                                                     fuse=False)
    g = fused.trace(*args)
    assert [n.op.__name__ for n in g.nodes] == ["matmul", "matmul_add"]
    assert g.nodes[1].inputs[-1] is g.nodes[0].outputs[0]
    assert fused(*args).tobytes() == unfused(*args).tobytes()


def test_fusion_reads_the_rounded_producer_value():
    args = (rand(40, 33, dtype=BF16), rand(33, 50, dtype=BF16), rand(50, dtype=BF16))
    fused, unfused = tilepy.compile(mlp_bf16), tilepy.compile(mlp_bf16, fuse=False)
    assert len(fused.trace(*args).nodes) == 1
    assert fused(*args).tobytes() == unfused(*args).tobytes()
    # without the rounding to bfloat16 between the two, the bits differ
    a, b = (x.astype(np.float32) for x in args[:2])
    acc = ops.matmul(a, b)
    unrounded = ops.bias_gelu(acc, args[2].astype(np.float32)).astype(BF16)
    assert unrounded.tobytes() != fused(*args).tobytes()


def test_reductions_take_epilogues_and_other_outputs_stay():
    args = (rand(9, 300), rand(300), rand(300), rand(300))
    fused, unfused = tilepy.compile(norm_then_gelu), tilepy.compile(norm_then_gelu,
                                                                    fuse=False)
    names = [n.op.__name__ for n in fused.trace(*args).nodes]
    assert names == ["layernorm_bias_gelu", "softmax"]
    for got, want in zip(fused(*args), unfused(*args)):
        assert got.tobytes() == want.tobytes()


def softmax_parts(x):
    e = ops.exp_sub(x, ops.row_max(x))
    return ops.div_rows(e, ops.row_sum(e))


def test_softmax_from_parts_fuses_to_one_row_kernel_with_the_same_bits():
    x = rand(9, 40)
    x[2, 5] = 80.0  # exp overflows without the max subtracted
    fused, unfused = tilepy.compile(softmax_parts), tilepy.compile(softmax_parts, fuse=False)
    g = fused.trace(x)
    assert len(g.nodes) == 1 and len(unfused.trace(x).nodes) == 4
    ir = str(g.nodes[0].op.kernel.ir)
    verify(g.nodes[0].op.kernel.func)
    # one max and one sum (the parts' copies merged), the row kept in a fragment
    assert ir.count("T.reduce_max(") == 1 and ir.count("T.reduce_sum(") == 1
    assert "if N <= 1024:" in ir
    want = unfused(x)
    assert np.array_equal(fused(x), want) and want.tobytes() == ops.softmax(x).tobytes()
    with tilepy.backend("jit"):
        got = fused(x)
    assert got.tobytes() == want.tobytes()


def prologue_a(x, g, b, w):
    return ops.matmul(ops.scale_shift(x, g, b), w)


def prologue_b(x, w, g, b):
    return ops.matmul(x, ops.scale_shift(w, g, b))


def prologue_bf16(x, w):
    return ops.matmul_bf16(ops.to_bf16(x), w)


def test_prologue_is_computed_on_the_gemm_tile_load():
    cases = [(prologue_a, (rand(20, 37), rand(37), rand(37), rand(37, 30))),
             (prologue_b, (rand(20, 37), rand(37, 30), rand(30), rand(30))),
             (prologue_bf16, (rand(20, 37), rand(37, 30, dtype=BF16)))]
    for fn, args in cases:
        fused, unfused = tilepy.compile(fn), tilepy.compile(fn, fuse=False)
        g = fused.trace(*args)
        assert len(g.nodes) == 1
        ir = str(g.nodes[0].op.kernel.ir)
        assert "T.gemm(prologue_shared" in ir or "prologue_shared, acc" in ir
        want = unfused(*args)
        assert fused(*args).tobytes() == want.tobytes()
    # the rounding to bfloat16 is kept: without it the bits differ
    x, w = cases[2][1]
    assert want.tobytes() != ops.matmul(x, w.astype(np.float32)).astype(BF16).tobytes()
    with tilepy.backend("jit"):
        got = tilepy.compile(prologue_a)(*cases[0][1])
    assert got.tobytes() == tilepy.compile(prologue_a, fuse=False)(*cases[0][1]).tobytes()


def test_a_reduction_is_not_inlined_into_a_gemm():
    args = (rand(9, 16), rand(16), rand(16), rand(16, 8))
    g = tilepy.compile(lambda x, a, b, w: ops.matmul(ops.layernorm(x, a, b), w)).trace(*args)
    assert [n.op.__name__ for n in g.nodes] == ["layernorm", "matmul"]
