"""Every op family of issue 16's list, forward and backward, gives the same bits on the JIT
(exact mode) as on the interpreter, op by op, in float32. The default run takes the ops
whose kernels the MLP training step already compiles (no new compile); the rest compile
their kernels (`make test-exhaustive`)."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, cat, nn

F = nn.functional
IDX = np.array([[1, 4, 1], [0, 3, 3]])
BAG, OFFS = np.array([1, 4, 1, 5, 0, 2, 2]), np.array([0, 3, 3, 5])
LABELS = np.array([2, 0, 4, 4, 1, 3])


def _bn(x, w, b):
    return F.batch_norm(x, np.zeros(3, np.float32), np.ones(3, np.float32), w, b, True)


# name -> (shapes of the float32 inputs, the op); "default" ops reuse the MLP step's kernels
DEFAULT = {
    "elementwise_broadcast": ([(3, 5, 4), (5, 1)], lambda x, y: (x + y) * y - x / y),
    "linear_matmul": ([(2, 3, 5), (4, 5), (4,)],
                      lambda x, w, b: F.linear(x, w, b) @ w * 0.5),
    "cross_entropy": ([(6, 5)], lambda x: F.cross_entropy(x, LABELS)),
    "relu": ([(4, 7)], lambda x: F.relu(x)),
    "sum_mean": ([(3, 4, 5)], lambda x: x.sum(1) + x.mean((0, 1), keepdim=True).sum(0)),
    "reshape_transpose_cat_slice": ([(2, 6), (3, 2)], lambda a, b: cat(
        [a.reshape(3, 4).T[1:3, ::2], b.permute(1, 0)[:, 1:]], dim=1) * 2.0),
}
EXHAUSTIVE = {
    "conv2d": ([(2, 2, 5, 5), (3, 2, 3, 3), (3,)],
               lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1)),
    "conv2d_stride_groups": ([(2, 4, 6, 5), (6, 2, 3, 3), (6,)],
                             lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2)),
    "max_pool2d": ([(2, 3, 5, 6)], lambda x: F.max_pool2d(x, 3, 2, padding=1)),
    "avg_pool2d": ([(2, 3, 5, 6)], lambda x: F.avg_pool2d(x, 2, 1, count_include_pad=False)),
    "pool_tiled": ([(2, 3, 4, 6)], lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)),
    "batch_norm": ([(4, 3, 2, 2), (3,), (3,)], _bn),
    "layer_norm": ([(3, 6), (6,), (6,)], lambda x, w, b: F.layer_norm(x, (6,), w, b)),
    "rms_norm": ([(3, 6), (6,)], lambda x, w: F.rms_norm(x, (6,), w)),
    "softmax": ([(3, 7)], lambda x: F.softmax(x, -1)),
    "attention_causal": ([(2, 5, 8), (2, 5, 8), (2, 5, 8)],
                         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, True)),
    "attention_cross": ([(2, 3, 8), (2, 6, 8), (2, 6, 8)],
                        lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
    "embedding": ([(5, 4)], lambda w: F.embedding(IDX, w)),
    "embedding_bag": ([(6, 3), (7,)], lambda w, p: F.embedding_bag(BAG, w, OFFS, "sum", p)
                      + F.embedding_bag(BAG, w, OFFS, "max")),
    "gelu_silu": ([(4, 9)], lambda x: F.gelu(x) + F.silu(x)),
    "tanh_sigmoid_exp_log": ([(4, 9)], lambda x: x.tanh() + x.sigmoid() + x.exp()
                             + (x * x + 1.0).log()),
    "dropout": ([(6, 50)], lambda x: F.dropout(x, 0.3, seed=77)),
    "max": ([(3, 4, 5)], lambda x: x.max(1) + x.max((0, 1), keepdim=True).sum(0)),
}


def _bits_of(case: dict, name: str, backend: str) -> list:
    shapes, op = case[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    ins = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
           for s in shapes]
    with tilepy.backend(backend):
        out = op(*ins)
        g = rng.standard_normal(out.shape).astype(np.float32)
        out.backward(g.reshape(out.shape))
    return [out.data] + [t.grad for t in ins]


def _same(case: dict, name: str) -> None:
    ref, got = _bits_of(case, name, "interp"), _bits_of(case, name, "jit")
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        assert np.array_equal(np.atleast_1d(a).view(np.uint32),
                              np.atleast_1d(b).view(np.uint32))
    assert any(np.abs(g).sum() > 0 for g in ref[1:])  # gradients reached the inputs


@pytest.mark.parametrize("name", sorted(DEFAULT))
def test_the_mlp_kernels_ops_give_the_interpreters_bits_on_the_jit(name):
    _same(DEFAULT, name)


@pytest.mark.exhaustive  # compiles about twenty kernels
@pytest.mark.parametrize("name", sorted(EXHAUSTIVE))
def test_every_other_op_gives_the_interpreters_bits_on_the_jit(name):
    _same(EXHAUSTIVE, name)
