"""bfloat16 autograd (interpreter): narrow tensors compute in float32 and round once per op
(each kernel's bits equal the float32 kernel's result rounded), a bf16 MLP step's loss and
gradients against float64 within a bound derived from that rule, float32 data autocast into
bf16 layers, and MixedPrecision (bf16 weights, float32 masters) training end to end."""

import ml_dtypes
import numpy as np
import pytest
from scipy.special import erf

import tilepy
from tilepy.models import Parameter, Tensor, nn
from tilepy.models import kops as K
from tilepy.models.errors import ModelError
from tilepy.models.nn.recurrent import recurrence
from tilepy.models.ops import in_float32
from tilepy.models.optim import AdamW, MixedPrecision

F = nn.functional
BF16 = ml_dtypes.bfloat16
U16, U32 = 2.0 ** -8, 2.0 ** -24  # unit roundoffs of bfloat16 and float32


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _bits(a):
    return np.asarray(a).view(np.uint16)


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_narrow_kernels_are_the_float32_kernels_rounded_once(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1500) * 3).astype(dtype)
    y = (rng.standard_normal(1500) + 0.1).astype(dtype)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    once = lambda a: K.convert(a, dtype)  # noqa: E731
    for op in ("add", "mul", "div", "maximum"):
        assert np.array_equal(_bits(K.binary(x, y, op)), _bits(once(K.binary(x32, y32, op))))
    for op in ("gelu", "silu", "tanh", "sigmoid", "exp"):
        want = K.unary(x32, op)
        assert np.array_equal(_bits(K.unary(x, op)), _bits(once(want)))
        assert np.array_equal(_bits(K.unary_bwd(x, once(want), y, op)),
                              _bits(once(K.unary_bwd(x32, once(want).astype(np.float32),
                                                     y32, op))))
    # 1/3 as a float32 coefficient, not a rounded narrow one
    assert np.array_equal(_bits(K.unary(x, "affine", 1 / 3, 0.5)),
                          _bits(once(K.unary(x32, "affine", 1 / 3, 0.5))))
    a, b = x[:24].reshape(4, 6), y[:30].reshape(6, 5)
    assert np.array_equal(_bits(K.matmul(a, b)),  # float32 accumulation, one rounding
                          _bits(once(K.matmul(a.astype(np.float32), b.astype(np.float32)))))
    big = np.full((2, 600), 1.0, dtype)  # a narrow accumulator would stop at 256 (bf16)
    assert list(K.reduce(big, (1,), "sum", False).astype(np.float32)) == [600.0, 600.0]
    # convert rounds to nearest even, as ml_dtypes does
    ties = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -9), 60000.5], np.float32)
    v = np.concatenate([rng.standard_normal(500).astype(np.float32), ties])
    assert np.array_equal(_bits(K.convert(v, dtype)), _bits(v.astype(dtype)))


def _gelu(a):
    return 0.5 * a * (1 + erf(a / np.sqrt(2)))


def _gelu_d(a):
    return 0.5 * (1 + erf(a / np.sqrt(2))) + a * np.exp(-a * a / 2) / np.sqrt(2 * np.pi)


def _stored(err, ref, scale=0.0):
    """The error bound of a value stored in bf16 after float32 arithmetic: the inputs'
    propagated error `err`, float32 evaluation (64 u32 of the value's inputs' `scale`:
    every kernel here has fewer than 64 float32 roundings per value) and one bf16
    rounding (u16 of the computed value's magnitude)."""
    e = err + 64 * U32 * (np.abs(ref) + scale + err)
    return e + U16 * (np.abs(ref) + e)


def _reference(x, y, w1, b1, w2, b2):
    """float64 forward and backward of the MLP and the derived error bound of each value."""
    m = x.shape[0]
    a1 = x @ w1.T + b1
    e_a1 = _stored(_stored(0, x @ w1.T, np.abs(x) @ np.abs(w1.T)), a1, np.abs(b1))
    h = _gelu(a1)
    e_h = _stored(1.13 * e_a1, h, np.abs(a1) ** 2 + 1)  # |gelu'| <= 1.13
    z = h @ w2.T + b2
    mm = np.abs(h) @ np.abs(w2.T)
    e_z = _stored(_stored(e_h @ np.abs(w2.T), h @ w2.T, mm), z, np.abs(b2))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    loss = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(m), y])
    # d loss / dz = (p - onehot) / M has L1 norm <= 2 / M per row; the loss is float32
    e_loss = 2 * e_z.max(1).mean() + 64 * U32 * (abs(loss) + np.abs(z).max())
    dz = (p - np.eye(z.shape[1])[y]) / m
    e_dz = _stored(2 * p * e_z.max(1, keepdims=True) / m, dz)  # |dp_j| <= 2 p_j |dz|_inf
    gw2, gb2 = dz.T @ h, dz.sum(0)
    e_gw2 = _stored(e_dz.T @ (np.abs(h) + e_h) + np.abs(dz.T) @ e_h, gw2,
                    np.abs(dz.T) @ np.abs(h))
    e_gb2 = _stored(e_dz.sum(0), gb2, np.abs(dz).sum(0))
    gh = dz @ w2
    e_gh = _stored(e_dz @ np.abs(w2), gh, np.abs(dz) @ np.abs(w2))
    ga1 = gh * _gelu_d(a1)  # |gelu''| <= 0.8
    e_ga1 = _stored(e_gh * (np.abs(_gelu_d(a1)) + 0.8 * e_a1) + np.abs(gh) * 0.8 * e_a1, ga1,
                    np.abs(gh) * (np.abs(a1) + 1))
    gw1, gb1 = ga1.T @ x, ga1.sum(0)
    e_gw1 = _stored(e_ga1.T @ np.abs(x), gw1, np.abs(ga1.T) @ np.abs(x))
    e_gb1 = _stored(e_ga1.sum(0), gb1, np.abs(ga1).sum(0))
    return (loss, e_loss), [(gw1, e_gw1), (gb1, e_gb1), (gw2, e_gw2), (gb2, e_gb2)]


def _mlp(seed=0):
    nn.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 4))


def _data(seed=1, m=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, 6)).astype(np.float32), rng.integers(0, 4, m)


def test_bf16_mlp_step_is_within_the_derived_bound_of_float64():
    model, (x, y) = _mlp(), _data()
    for p in model.parameters():
        p.data = p.data.astype(BF16)
    loss = F.cross_entropy(model(x), y)  # float32 data is rounded into the bf16 layer
    loss.backward()
    assert loss.dtype == np.float32 and model[0].weight.grad.dtype == BF16
    wide = [np.asarray(a, np.float64) for a in
            (x.astype(BF16), *(p.data for p in model.parameters()))]
    (want, e_loss), grads = _reference(wide[0], y, *wide[1:])
    assert abs(loss.item() - want) <= e_loss and e_loss < 0.05 * abs(want)
    for p, (ref, bound) in zip(model.parameters(), grads):
        err = np.abs(p.grad.astype(np.float64) - ref)
        assert np.all(err <= bound), (err / bound).max()
        # not vacuous: a worst case of a few bf16 roundings per value (errors are 4e-3 here)
        assert bound.max() < 0.2 * np.abs(ref).max()


def test_mixed_precision_trains_a_bf16_mlp_end_to_end():
    model, (x, y) = _mlp(), _data(m=32)
    params = list(model.parameters())
    ref = [Parameter(p.data.copy()) for p in params]  # float32 AdamW on the same grads
    opt = AdamW(ref, lr=0.05)
    mp = MixedPrecision(params, AdamW, lr=0.05, policy="bf16")
    losses = []
    for _ in range(6):
        mp.zero_grad()
        loss = F.cross_entropy(model(x), y)
        mp.scale_loss(loss).backward()
        for r, p in zip(ref, params):
            assert p.grad.dtype == BF16
            r.grad = p.grad.astype(np.float32) * np.float32(1 / mp.scaler.scale)
        assert mp.step()
        opt.step()
        losses.append(loss.item())
        for r, m, p in zip(ref, mp.masters, params):
            assert m.data.dtype == np.float32 and np.array_equal(m.data, r.data)
            assert np.array_equal(_bits(p.data), _bits(r.data.astype(BF16)))
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.8 * losses[0]


def test_bf16_layers_cast_float32_data_and_refuse_other_mismatches():
    lin = nn.Linear(3, 2)
    lin.weight.data = lin.weight.data.astype(BF16)
    lin.bias.data = lin.bias.data.astype(BF16)
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    out = lin(x)
    assert out.dtype == BF16
    out.sum().backward()
    assert x.grad.dtype == np.float32  # the cast's gradient returns to the input's dtype
    col = lin.weight.data.astype(np.float32).sum(0)  # exact in float32, rounded once to bf16
    np.testing.assert_array_equal(x.grad, np.tile(col.astype(BF16).astype(np.float32), (2, 1)))
    t = Tensor(np.ones(3, np.float32)).bfloat16()
    assert t.dtype == BF16 and t.float().dtype == np.float32
    with pytest.raises(ModelError, match=r"expected input of dtype float32; got bfloat16"):
        nn.Linear(3, 2)(np.ones((2, 3), BF16))


@pytest.mark.exhaustive
def test_bf16_step_gives_the_same_bits_on_the_jit():
    results = []
    for backend in ("interp", "jit"):
        with tilepy.backend(backend):
            model, (x, y) = _mlp(), _data()
            for p in model.parameters():
                p.data = p.data.astype(BF16)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            results.append([loss.data] + [p.grad for p in model.parameters()])
    for a, b in zip(*results):
        assert a.dtype == b.dtype
        assert np.array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))


def _lstm(x, h0, c0, w_hh, b_hh, w_hr):
    return in_float32(recurrence, "lstm", x, h0, c0, w_hh, b_hh, None, False, w_hr)


_IDX = np.array([[0, 3, 3], [4, 1, 0]])
_CASES = {  # name -> (shapes of the float inputs, the op: one that autocast keeps in float32)
    "conv2d": ([(2, 2, 4, 4), (3, 2, 3, 3), (3,)],
               lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    "max_pool2d": ([(2, 3, 4, 4)], lambda x: F.max_pool2d(x, 2)),
    "layer_norm": ([(3, 4)], lambda x: F.layer_norm(x, (4,))),
    "batch_norm": ([(4, 3, 2), (3,), (3,)], lambda x, w, b: F.batch_norm(
        x, np.zeros(3, np.float32), np.ones(3, np.float32), w, b)),
    "softmax": ([(3, 5)], lambda x: F.softmax(x, -1)),
    "embedding": ([(5, 4)], lambda w: F.embedding(_IDX, w)),
    "lstm_proj": ([(3, 2, 12), (2, 2), (2, 3), (12, 2), (12,), (2, 3)], _lstm),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_float32_ops_on_bf16_tensors_are_the_float32_op_rounded_once(name):
    """Ops kept in float32 (convolution, pooling, norms, softmax, embedding, recurrences):
    on bf16 tensors the output is the float32 op's on the same values rounded once, and
    so is each input's gradient, given the same output gradient."""
    shapes, op = _CASES[name]
    rng = np.random.default_rng(5)
    values = [rng.standard_normal(s).astype(BF16) for s in shapes]
    narrow = [Tensor(v, requires_grad=True) for v in values]
    wide = [Tensor(v.astype(np.float32), requires_grad=True) for v in values]
    outs = [op(*narrow), op(*wide)]
    assert outs[0].dtype == BF16
    assert np.array_equal(_bits(outs[0].data), _bits(outs[1].data.astype(BF16)))
    g = rng.standard_normal(outs[0].shape).astype(BF16)
    (outs[0] * Tensor(g)).sum().backward()
    (outs[1] * Tensor(g.astype(np.float32))).sum().backward()
    for a, b in zip(narrow, wide):
        assert a.grad.dtype == BF16
        assert np.array_equal(_bits(a.grad), _bits(b.grad.astype(BF16)))


def test_mixed_precision_narrows_a_float32_conv_model_that_then_takes_float32_data():
    nn.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 3))
    mp = MixedPrecision(model.parameters(), AdamW, lr=0.05)
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((16, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, 16)
    losses = []
    for _ in range(4):
        mp.zero_grad()
        out = model(x)  # every layer built for float32 now holds bf16 parameters
        loss = F.cross_entropy(out, y)
        mp.scale_loss(loss).backward()
        assert out.dtype == BF16 and mp.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert model[1].running_mean.dtype == np.float32  # buffers keep their dtype


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_gelu_keeps_its_cdf_for_the_backward_with_unarys_bits(dtype):
    """F.gelu's forward keeps the normal CDF (float32 for bfloat16 storage) and its
    backward reads it instead of computing the erf again: the bits of unary's and
    unary_bwd's GELU, signed zeros, infinities and NaN included."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.uniform(-7, 7, 1200), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                   1e-30, -40.0]]).astype(dtype)
    g = rng.standard_normal(x.size).astype(dtype)
    view = np.uint32 if dtype == np.float32 else np.uint16
    xt = Tensor(x.reshape(-1, 1), requires_grad=True)
    y = F.gelu(xt)
    y.backward(g.reshape(-1, 1))
    want = K.unary(x, "gelu")
    assert np.array_equal(y.data.reshape(-1).view(view), want.view(view))
    assert np.array_equal(xt.grad.reshape(-1).view(view),
                          K.unary_bwd(x, want, g, "gelu").view(view))
    assert "gelu_bwd" in {k[0].__name__ for k in K._KERNELS}
