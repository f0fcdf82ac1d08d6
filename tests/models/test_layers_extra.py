"""Normalisation, embedding and dropout: gradients against float64 central differences,
values against direct numpy formulas, and the dropout mask against an independent numpy
implementation of its hash (interpreter)."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError

F = nn.functional


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def rand(rng, *shape):
    return rng.standard_normal(shape)


def test_layer_norm_and_rms_norm_gradients():
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, 3, 5), rand(rng, 5), rand(rng, 5)
    check(lambda x, w, b: F.layer_norm(x, (5,), w, b), x, w, b)
    check(lambda x, w: F.rms_norm(x, (5,), w), x, w)
    check(lambda x: F.layer_norm(x, (2, 5)), rand(rng, 2, 2, 5))


def test_layer_norm_values():
    rng = np.random.default_rng(1)
    x = rand(rng, 4, 6)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(F.layer_norm(Tensor(x), (6,)).data, want, rtol=1e-12)
    rms = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(F.rms_norm(Tensor(x), (6,)).data, rms, rtol=1e-12)


def test_batch_norm_training_gradient_and_running_statistics():
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, 3, 2, 2, 2), rand(rng, 2), rand(rng, 2)
    rm, rv = np.zeros(2), np.ones(2)
    check(lambda x, w, b: F.batch_norm(x, rm.copy(), rv.copy(), w, b, True), x, w, b)
    F.batch_norm(Tensor(x), rm, rv, training=True, momentum=0.1)
    np.testing.assert_allclose(rm, 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-12)


def test_batch_norm_eval_uses_running_statistics():
    bn = nn.BatchNorm2d(2, dtype=np.float64)
    bn.running_mean[:] = [1.0, -1.0]
    bn.running_var[:] = [4.0, 0.25]
    bn.eval()
    x = np.ones((1, 2, 1, 1))
    np.testing.assert_allclose(bn(x).data.ravel(), [0.0, 2.0 / np.sqrt(0.25 + 1e-5)],
                               rtol=1e-12)
    assert "running_var" in bn.state_dict()


def test_embedding_forward_and_sparse_gradient():
    rng = np.random.default_rng(3)
    w = rand(rng, 5, 3)
    idx = np.array([[4, 1], [4, 4]])
    check(lambda w: F.embedding(idx, w), w)
    t = Tensor(w, requires_grad=True)
    F.embedding(idx, t).sum().backward()
    np.testing.assert_array_equal(t.grad[:, 0], [0, 1, 0, 0, 3])
    with pytest.raises(ModelError, match=r"indices must lie in \[0, 5\); got values from 0 to 5"):
        F.embedding(np.array([0, 5]), t)


def _lowbias32(x):
    x = x.astype(np.uint64) & 0xFFFFFFFF
    for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        x ^= x >> shift
        x = (x * mult) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_dropout_mask_is_the_documented_hash_and_backward_reuses_it():
    x = Tensor(np.ones(3000), requires_grad=True)
    y = F.dropout(x, p=0.25, seed=12345)
    i = np.arange(3000, dtype=np.uint64)
    h = _lowbias32(i ^ _lowbias32(np.array([12345]))[0])
    keep = (h >> 8).astype(np.float64) / 2**24 >= 0.25
    np.testing.assert_array_equal(y.data, np.where(keep, 1 / 0.75, 0.0))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, y.data)
    assert 0.72 < keep.mean() < 0.78


def test_dropout_module_is_identity_in_eval_and_seeded():
    d = nn.Dropout(0.5)
    x = np.ones((4, 8))
    nn.manual_seed(7)
    a = d(x).data
    nn.manual_seed(7)
    np.testing.assert_array_equal(a, d(x).data)
    d.eval()
    assert d(Tensor(x)).data is x or np.array_equal(d(Tensor(x)).data, x)


def test_norm_layers_check_their_input():
    with pytest.raises(ModelError, match=r"LayerNorm\(\(8,\).*\): expected input of shape "
                                         r"\(\.\.\., 8\); got \(2, 7\)"):
        nn.LayerNorm(8)(np.zeros((2, 7), np.float32))
    with pytest.raises(ModelError, match=r"BatchNorm2d\(3.*\): expected input of shape "
                                         r"\(N, 3, \.\.\.\); got \(2, 4, 5, 5\)"):
        nn.BatchNorm2d(3)(np.zeros((2, 4, 5, 5), np.float32))


def test_softmax_bmm_and_attention_gradients():
    rng = np.random.default_rng(5)
    check(lambda x: F.softmax(x), rand(rng, 3, 4))
    check(lambda a, b: F.bmm(a, b), rand(rng, 2, 3, 4), rand(rng, 2, 4, 2))
    q, k, v = rand(rng, 2, 3, 4), rand(rng, 2, 5, 4), rand(rng, 2, 5, 4)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    q3 = rand(rng, 1, 4, 2)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q3,
          rand(rng, 1, 4, 2), rand(rng, 1, 4, 2))


def _attend(path, q, k, v, g, causal):
    ts = [Tensor(x, requires_grad=True) for x in (q, k, v)]
    out = path(*ts, causal)
    (out * Tensor(g)).sum().backward()
    return out, [out.data] + [t.grad for t in ts]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("keys", [6, 9, 4], ids=["self", "more-keys", "fewer-keys"])
def test_float32_attention_runs_the_flash_kernels_and_agrees_with_the_composed_ops(
        causal, keys):
    # self- and cross-attention (L=6 queries, S keys); causal top-left aligned in both paths
    from tilepy.models.nn import attention as A

    rng = np.random.default_rng(8)
    q, g = (rng.standard_normal((2, 3, 6, 4)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((2, 3, keys, 4)).astype(np.float32) for _ in range(2))
    with tilepy.backend("interp"):
        out, flash = _attend(F.scaled_dot_product_attention, q, k, v, g, causal)
        _, composed = _attend(A._composed, q, k, v, g, causal)
    assert out._node.name == "attention"  # the flash kernels, not bmm + softmax
    for name, a, b in zip(("out", "dq", "dk", "dv"), flash, composed):
        # two float32 orders of the same sums: |a - b| is a few ulps of the terms' size
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


def test_float16_cross_attention_is_the_library_kernels_bit_for_bit():
    # float16 runs the flash kernels (float32 accumulation) instead of bmm + softmax in
    # float16: the op passes the library's outputs and gradients through unchanged
    from tilepy.kernels.attention_api import attention, attention_backward

    rng = np.random.default_rng(9)
    q, g = (rng.standard_normal((2, 3, 5, 8)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((2, 3, 7, 8)).astype(np.float16) for _ in range(2))
    ts = [Tensor(x, requires_grad=True) for x in (q, k, v)]
    with tilepy.backend("interp"):
        out = F.scaled_dot_product_attention(*ts, is_causal=True)
        out.backward(g)  # the models' elementwise ops take float32/float64 only
        o, lse = attention(*(x.reshape(6, 1, -1, 8) for x in (q, k, v)), causal=True)
        want = attention_backward(*(x.reshape(6, 1, -1, 8) for x in (q, k, v)), o, lse,
                                  g.reshape(6, 1, 5, 8), causal=True)
    assert out._node.name == "attention" and out.dtype == np.float16
    got = [out.data] + [t.grad for t in ts]
    for name, a, b, x in zip(("out", "dq", "dk", "dv"), got, (o, *want), (q, q, k, v)):
        assert a.shape == x.shape and a.dtype == np.float16, name
        np.testing.assert_array_equal(a.reshape(-1), b.reshape(-1), err_msg=name)


def test_multihead_cross_attention_runs_the_flash_kernels(monkeypatch):
    from tilepy.models.nn import attention as A

    calls = []
    real = A.flash_forward
    monkeypatch.setattr(A, "flash_forward", lambda q, k, v, c, block: calls.append(k.shape)
                        or real(q, k, v, c, block))
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    rng = np.random.default_rng(10)
    x, mem = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 9, 8))
    y, _ = mha(x.astype(np.float32), mem.astype(np.float32), mem.astype(np.float32))
    assert y.shape == (3, 5, 8) and calls == [(6, 1, 9, 4)]


def test_attention_values():
    rng = np.random.default_rng(6)
    q, k, v = rand(rng, 2, 3, 4), rand(rng, 2, 3, 4), rand(rng, 2, 3, 4)
    s = q @ np.swapaxes(k, 1, 2) / 2.0
    s = s + np.where(np.arange(3)[None, :] > np.arange(3)[:, None], -np.inf, 0.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    got = F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=True)
    np.testing.assert_allclose(got.data, want, rtol=1e-12, atol=1e-14)
