"""Low-precision Linear layers (interpreter): the quantise kernel against ml_dtypes and
numpy counts, fp8/bf16 layers equal to float32 ones on exactly representable values,
delayed scaling's second step against a numpy reference, dynamic switching on data that
underflows e4m3, and `convert` keeping the model's Parameters."""

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.nn.lowp import Scales, convert, quantize
from tilepy.precision.switching import PrecisionController, SwitchConfig

F = nn.functional
E4M3 = ml_dtypes.float8_e4m3fn


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def test_quantize_codes_amax_and_counts():
    x = np.random.default_rng(0).standard_normal(2500).astype(np.float32) * 3
    x[:5] = [1e-4, -2e-4, 0.0, 500.0, -1e-6]
    s = Scales()
    s.x.scale = 4.0
    fr = [0.0, 0.0]
    q, inv = quantize(x, "float8_e4m3fn", s.x, fr, True)
    want = np.clip(x * np.float32(4), -448, 448).astype(E4M3)
    np.testing.assert_array_equal(q.view(np.uint8), want.view(np.uint8))
    assert inv == np.float32(0.25) and s.x.history[0] == np.float32(500.0)
    a = np.abs(x * np.float32(4))
    assert fr == [(a > 448).sum() / x.size, ((a > 0) & (a < 2.0**-6)).sum() / x.size]
    assert s.x.scale == np.float32(448) / np.float32(500)


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_exact_values_give_the_float32_layer_bit_for_bit(precision):
    rng = np.random.default_rng(1)
    x, w = rng.integers(-8, 9, (5, 6)).astype(np.float32), rng.integers(-8, 9, (3, 6))
    b, g = rng.integers(-4, 5, 3).astype(np.float32), rng.integers(-4, 5, (5, 3))
    results = []
    for prec in (precision, "fp32"):
        nn.manual_seed(0)
        layer = convert(nn.Sequential(nn.Linear(6, 3)), prec)
        layer[0].weight.data[:] = w
        layer[0].bias.data[:] = b
        xt = Tensor(x, requires_grad=True)
        y = layer(xt)  # the first step's scale is 1: every value is exact in e4m3/e5m2
        (y * Tensor(g.astype(np.float32))).sum().backward()
        results.append((y.data, xt.grad, layer[0].weight.grad, layer[0].bias.grad))
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


def test_delayed_scaling_second_step_matches_numpy():
    rng = np.random.default_rng(2)
    layer = convert(nn.Sequential(nn.Linear(8, 4, bias=False)), "fp8")[0]
    x1, x2 = (rng.standard_normal((3, 8)).astype(np.float32) * k for k in (5, 7))
    layer(x1)
    sx = np.float32(448) / np.abs(x1).max()
    sw = np.float32(448) / np.abs(layer.weight.data).max()
    assert layer.scales.x.scale == sx
    got = layer(x2).data
    qx = np.clip(x2 * sx, -448, 448).astype(E4M3).astype(np.float64)
    qw = (layer.weight.data * sw).astype(E4M3).astype(np.float64)
    want = (qx @ qw.T) * float(np.float32(1 / sx) * np.float32(1 / sw))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_switching_widens_the_layer_whose_inputs_underflow_fp8():
    ctl = PrecisionController(SwitchConfig(patience=2, cooldown=50))
    nn.manual_seed(0)
    model = convert(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), ctl)
    rng = np.random.default_rng(3)
    x = (10.0 ** rng.uniform(-9, 0, (64, 4)) * rng.choice([-1, 1], (64, 4))).astype(np.float32)
    formats = []
    for _ in range(3):
        model.zero_grad()
        model(x).sum().backward()
        formats.append((model[0].format(), model[1].format()))
    # layer 0's inputs span 1e-9..1: about half underflow e4m3 at any scale, every step
    assert formats[0][0] == "float8_e4m3fn" and formats[1][0] == "bfloat16"
    assert model[0].scales.fractions[1] > 0.3
    assert ("0", "float8_e4m3fn", "bfloat16") in [s[1:] for s in ctl.switches]
    assert "format=bfloat16" in repr(model[0])


def test_convert_keeps_parameters_names_and_checks_its_argument():
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))
    params, keys = list(model.parameters()), list(model.state_dict())
    convert(model, "bf16")
    assert list(model.parameters()) == params and list(model.state_dict()) == keys
    assert model[2][0].name == "2.0"
    with pytest.raises(ModelError, match=r"precision must be 'fp8', 'bf16', 'fp32' or a "
                                         r"PrecisionController; got 'fp4'"):
        convert(nn.Sequential(nn.Linear(2, 2)), "fp4")
    with pytest.raises(ModelError, match=r"expected input of shape \(\.\.\., 3\); got \(2, 5\)"):
        model(np.zeros((2, 5), np.float32))


def _mixed_fp8_steps(steps: int) -> tuple:
    """A convert(..., "fp8") MLP trained inside MixedPrecision (bfloat16 storage, float32
    AdamW masters): (losses, the first layer's output, its weight's grad, the masters)."""
    from tilepy.models import optim
    from tilepy.models.optim.mixed import MixedPrecision

    nn.manual_seed(0)
    model = convert(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), "fp8")
    mp = MixedPrecision(model.parameters(), optim.AdamW, lr=1e-2, policy="bf16")
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((32, 8)).astype(np.float32), np.arange(32) % 4
    losses = []
    for _ in range(steps):
        h = model[0](Tensor(x))
        loss = F.cross_entropy(model[2](model[1](h)), y.astype(np.int32))
        mp.zero_grad()
        mp.scale_loss(loss).backward()
        mp.step()
        losses.append(float(loss.numpy()))
    return losses, h.data, model[0].weight.grad, [m.data.copy() for m in mp.masters]


def test_fp8_layers_train_inside_mixed_precision_with_bf16_parameters():
    """MixedPrecision narrows a converted model's Parameters to bfloat16: the fp8 layers
    widen them (exactly) for quantisation, and give their output and gradients in the
    parameters' dtype, so the masters get bf16 gradients and the loss falls."""
    losses, h, gw, _ = _mixed_fp8_steps(8)
    assert h.dtype == ml_dtypes.bfloat16 and gw.dtype == ml_dtypes.bfloat16
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.exhaustive
def test_fp8_layers_inside_mixed_precision_give_the_interpreters_bits_on_the_jit():
    want = _mixed_fp8_steps(3)
    with tilepy.backend("jit"):
        got = _mixed_fp8_steps(3)
    assert got[0] == want[0]
    for a, b in zip(got[1:3] + tuple(got[3]), want[1:3] + tuple(want[3])):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
