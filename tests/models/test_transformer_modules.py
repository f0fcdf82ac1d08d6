"""nn.MultiheadAttention and nn.TransformerBlock (interpreter): values against a float64
numpy implementation, gradients against float64 central differences, causality, layouts
and input errors."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.nn.transformer import multi_head_attention


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _numpy_mha(q, k, v, heads, w, b, wo, bo, causal=False):
    """(N, L, E) batch-first multi-head attention in float64 numpy."""
    n, length, e = q.shape
    d = e // heads
    proj = [x @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e] for i, x in enumerate((q, k, v))]
    qh, kh, vh = (p.reshape(n, -1, heads, d).transpose(0, 2, 1, 3) for p in proj)
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:
        s = s + np.where(np.arange(s.shape[-1])[None] > np.arange(length)[:, None], -np.inf, 0)
    p = np.exp(s - s.max(-1, keepdims=True))
    y = (p / p.sum(-1, keepdims=True)) @ vh
    return y.transpose(0, 2, 1, 3).reshape(n, length, e) @ wo.T + bo


def test_multihead_attention_values_self_cross_and_sequence_first():
    rng = np.random.default_rng(0)
    nn.manual_seed(0)
    m = nn.MultiheadAttention(4, 2, dtype=np.float64)
    m.in_proj_bias.data[:] = rng.standard_normal(12)
    q, kv = rng.standard_normal((3, 2, 4)), rng.standard_normal((5, 2, 4))  # (L, N, E)
    ps = (m.in_proj_weight.data, m.in_proj_bias.data, m.out_proj.weight.data,
          m.out_proj.bias.data)
    got, weights = m(q, kv, kv)
    want = _numpy_mha(q.transpose(1, 0, 2), *(2 * [kv.transpose(1, 0, 2)]), 2, *ps)
    assert weights is None
    np.testing.assert_allclose(got.data, want.transpose(1, 0, 2), rtol=1e-12, atol=1e-14)
    x = Tensor(q)
    got = m(x, x, x, is_causal=True)[0].data
    want = _numpy_mha(*(3 * [q.transpose(1, 0, 2)]), 2, *ps, causal=True)
    np.testing.assert_allclose(got, want.transpose(1, 0, 2), rtol=1e-12, atol=1e-14)


def test_multihead_attention_gradients():
    rng = np.random.default_rng(1)
    w, wo = rng.standard_normal((12, 4)) * 0.5, rng.standard_normal((4, 4)) * 0.5
    b, bo = rng.standard_normal(12), rng.standard_normal(4)
    q, kv = rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 3, 4))
    check(lambda q, k, v, b: multi_head_attention(q, k, v, 2, Tensor(w), b, Tensor(wo),
                                                  Tensor(bo)), q, kv, kv.copy(), b)
    check(lambda x, wo: multi_head_attention(x, x, x, 2, Tensor(w), Tensor(b), wo, None,
                                             is_causal=True), q, wo)


def test_transformer_block_is_causal_and_trains():
    nn.manual_seed(2)
    block = nn.TransformerBlock(8, 2, dim_feedforward=16, causal=True, dtype=np.float64)
    x = np.random.default_rng(3).standard_normal((2, 5, 8))
    y = block(x).data
    later = x.copy()
    later[:, 3:] += 1.0  # changing tokens 3.. leaves the outputs at 0..2 unchanged
    np.testing.assert_array_equal(block(later).data[:, :3], y[:, :3])
    assert not np.allclose(block(later).data[:, 3:], y[:, 3:])
    open_block = nn.TransformerBlock(8, 2, causal=False, norm="rms", activation="relu",
                                     dtype=np.float64)
    assert not np.array_equal(open_block(later).data[:, :3], open_block(x).data[:, :3])
    check(lambda x: nn.TransformerBlock.forward(block, x), x[:1, :3])
    names = {k for k, _ in block.named_parameters()}
    assert {"attn.in_proj_weight", "attn.out_proj.weight", "norm1.weight",
            "mlp.0.weight"} <= names


def test_attention_module_errors():
    with pytest.raises(ModelError, match=r"num_heads=3 must divide embed_dim=8"):
        nn.MultiheadAttention(8, 3)
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    x = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(ModelError, match=r"expected query of shape \(N, L, E\) with E=8; "
                                         r"got \(2, 4, 6\)"):
        m(x[..., :6], x, x)
    with pytest.raises(ModelError, match=r"key and value must have one shape"):
        m(x, x, x[:, :3])
    with pytest.raises(ModelError, match=r"need_weights=True is not supported"):
        m(x, x, x, need_weights=True)


@pytest.mark.parametrize("causal", [False, True])
def test_short_sequences_small_flash_tiles_give_the_same_bits(causal):
    from tilepy.kernels.attention_api import attention, attention_backward
    from tilepy.models.nn import attention as A

    rng = np.random.default_rng(5)
    q, k, v, g = (rng.standard_normal((3, 1, 13, 8)).astype(np.float32) for _ in range(4))
    got = {}
    with tilepy.backend("interp"):
        for b in (A.SMALL_BLOCK, 64):
            o, lse = attention(q, k, v, causal, block_M=b, block_N=b)
            got[b] = (o, lse, *attention_backward(q, k, v, o, lse, g, causal, block=b))
    for small, big in zip(got[A.SMALL_BLOCK], got[64]):
        assert small.tobytes() == big.tobytes()
    rows = A.SMALL_ROWS // 16
    assert A._block(np.zeros((rows, 1, 16, 8)), np.zeros((rows, 1, 16, 8))) == A.SMALL_BLOCK
    assert A._block(np.zeros((rows, 1, 17, 8)), np.zeros((rows, 1, 16, 8))) == 64
    assert A._block(np.zeros((2, 1, 16, 8)), np.zeros((2, 1, 16, 8))) == 64


@pytest.mark.parametrize("causal", [False, True])
def test_attention_op_launches_the_library_kernels_directly_with_their_bits(causal):
    """scaled_dot_product_attention runs the flash kernels through the models' launch
    (each kernel a profiled launch, no per-call argument binding) and gives the bits of
    the library's attention and attention_backward, cross-attention included."""
    from tilepy.kernels.attention_api import attention, attention_backward
    from tilepy.models.kernels.launch import profile
    from tilepy.models.nn.functional import scaled_dot_product_attention

    rng = np.random.default_rng(6)
    q, g = (rng.standard_normal((2, 3, 13, 8)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((2, 3, 9, 8)).astype(np.float32) for _ in range(2))
    tq, tk, tv = (Tensor(x, requires_grad=True) for x in (q, k, v))
    with profile() as rec:
        out = scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        out.backward(g)
    assert {n: c for n, (c, _) in rec.items()} == {
        "attention_fwd": 1, "attention_delta": 1, "attention_dkdv": 1, "attention_dq_sum": 1}
    q4, k4, v4, g4 = (x.reshape(6, 1, x.shape[2], 8) for x in (q, k, v, g))
    o, lse = attention(q4, k4, v4, causal)
    want = (o, *attention_backward(q4, k4, v4, o, lse, g4, causal))
    got = (out.numpy(), tq.grad, tk.grad, tv.grad)
    for a, b in zip(got, want):
        assert a.tobytes() == b.reshape(a.shape).tobytes()


def test_packed_attention_is_the_three_selections_bits_without_summing_their_gradients():
    """packed_attention(qkv) (MultiheadAttention's self-attention) gives the output and
    qkv gradient of attending to qkv[0], qkv[1], qkv[2], and its backward launches no
    binary kernel (three selections' gradients were scattered into zeros and added)."""
    from tilepy.models.kernels.launch import profile
    from tilepy.models.nn.attention import packed_attention
    from tilepy.models.nn.functional import scaled_dot_product_attention

    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((3, 2, 3, 11, 8)).astype(np.float32), \
        rng.standard_normal((2, 3, 11, 8)).astype(np.float32)
    a, b = Tensor(x.copy(), requires_grad=True), Tensor(x.copy(), requires_grad=True)
    want = scaled_dot_product_attention(a[0], a[1], a[2], is_causal=True)
    want.backward(g)
    with profile() as rec:
        got = packed_attention(b, is_causal=True)
        got.backward(g)
    assert "binary" not in rec and rec["attention_dkdv"][0] == 1
    assert got.numpy().tobytes() == want.numpy().tobytes()
    assert b.grad.tobytes() == a.grad.tobytes()


def _split_heads_attention(qkv, heads, causal):
    """qkv_attention as composed before it: heads split by a copy, merged by another."""
    from tilepy.models.nn.attention import packed_attention

    n, length, e3 = qkv.shape
    split = qkv.reshape(n, length, 3, heads, e3 // (3 * heads)).permute(2, 0, 3, 1, 4)
    return packed_attention(split, causal).permute(0, 2, 1, 3).reshape(n, length, e3 // 3)


@pytest.mark.parametrize("causal", [False, True])
def test_qkv_attention_is_the_split_heads_bits_without_copying_heads(causal):
    """qkv_attention reads the (N, L, 3E) projection's rows in place: the output and the
    qkv gradient are the split-heads path's bits (float32 and bfloat16, 64-row tiles
    with a partial tile and the 16-row tiles of short sequences), and it records no host
    copy (the split and merge copies are gone)."""
    import ml_dtypes

    from tilepy.models.kernels import record as hooks
    from tilepy.models.nn.attention import qkv_attention
    from tilepy.models.replay import Recording

    rng = np.random.default_rng(11)
    for n, length, heads, d, dt in ((2, 70, 2, 8, np.float32), (3, 5, 3, 4, ml_dtypes.bfloat16),
                                    (256, 4, 4, 2, np.float32)):
        x = rng.standard_normal((n, length, 3 * heads * d)).astype(dt)
        g = rng.standard_normal((n, length, heads * d)).astype(dt)
        a, b = Tensor(x.copy(), requires_grad=True), Tensor(x.copy(), requires_grad=True)
        want = _split_heads_attention(a, heads, causal)
        want.backward(g)
        rec = Recording()
        hooks.ACTIVE.append(rec)
        try:
            got = qkv_attention(b, heads, is_causal=causal)
            got.backward(g)
        finally:
            hooks.ACTIVE.remove(rec)
        kinds = [s[0] for s in rec.steps]  # fwd; delta, dkdv, dq_sum; b.grad bound
        assert kinds == ["launch"] * 4 + ["grad"]
        assert got.shape == (n, length, heads * d) and b.grad.shape == x.shape
        assert got.numpy().tobytes() == want.numpy().tobytes()
        assert b.grad.tobytes() == a.grad.tobytes() and np.abs(b.grad).sum() > 0


@pytest.mark.exhaustive  # compiles the packed flash kernels (exact and fast)
def test_qkv_attention_on_the_jit_gives_the_interpreters_bits_and_fast_mode_is_close():
    """The packed kernels on the JIT: exact mode gives the interpreter's bits; fast mode
    (its loops compiled with contraction and reassociation, so other addresses may move a
    last bit) stays within float32 rounding of the interpreter, as the split path's."""
    from tilepy.models.nn.attention import qkv_attention

    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 70, 3 * 2 * 8)).astype(np.float32)
    g = rng.standard_normal((2, 70, 2 * 8)).astype(np.float32)

    def run(f, **backend):
        t = Tensor(x.copy(), requires_grad=True)
        with tilepy.backend(**backend):
            y = f(t, 2, True)
            y.backward(g)
        return y.numpy(), t.grad

    ref = run(qkv_attention, name="interp")
    exact = run(qkv_attention, name="jit")
    fast, fast_split = run(qkv_attention, name="jit", fast=True), \
        run(_split_heads_attention, name="jit", fast=True)
    for a, b, c, d in zip(ref, exact, fast, fast_split):
        assert a.tobytes() == b.tobytes()
        np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(c, d, rtol=1e-5, atol=1e-6)
