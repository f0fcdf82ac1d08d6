"""Op graphs: tilepy.compile(fn) traces tile ops, fuses element-wise epilogues into their
producer, and gives interp(unfused) == interp(fused) == jit(fused), bit for bit."""

import numpy as np

import tilepy
from tests.tileop import ops
from tilepy.ir.verify import verify
from tilepy.precision.formats import get_format

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


def test_gemm_bias_gelu_becomes_one_kernel_with_the_same_bits():
    args = (rand(70, 48), rand(48, 100), rand(100), rand(100, 30))
    fused, unfused = tilepy.compile(mlp), tilepy.compile(mlp, fuse=False)
    g = fused.trace(*args)
    assert [n.op.__name__ for n in g.nodes] == ["matmul_bias_gelu", "matmul"]
    assert len(unfused.trace(*args).nodes) == 3
    k = g.nodes[0].op.kernel
    verify(k.func)
    assert "T.gemm(" in str(k.ir) and "T.tanh(" in str(k.ir)
    want = unfused(*args)
    assert np.array_equal(fused(*args), want)
    with tilepy.backend("jit"):
        got = fused(*args)
    assert got.tobytes() == want.tobytes()


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
