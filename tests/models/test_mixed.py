"""Mixed precision on the optimiser side (tilepy.models.optim.MixedPrecision): float32
master weights, bf16 copies rounded to nearest even, loss-scaled gradients unscaled inside
the update kernel, steps with inf/NaN gradients skipped, state round trips, interp == JIT."""

import math

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tilepy.models import Parameter
from tilepy.models.optim import AdamW, MixedPrecision
from tilepy.models.training.errors import OptimizerError
from tilepy.precision.scaling import DynamicLossScaler

BF16 = ml_dtypes.bfloat16
SHAPES = [(4, 6), (6,), (1300,)]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]


def _grads(steps, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(steps)]


def _mp_run(grads, scaler=None, poison=None, **kw):
    params = _params()
    mp = MixedPrecision(params, AdamW, lr=0.01, loss_scaler=scaler, **kw)
    applied = []
    for t, gs in enumerate(grads):
        mp.zero_grad()
        for k, (p, g) in enumerate(zip(params, gs)):
            p.grad = g * np.float32(mp.scaler.scale)  # a backward pass of the scaled loss
            if poison == (t, k):
                p.grad[0] = np.inf
        applied.append(mp.step())
    return mp, params, applied


def test_master_weights_follow_the_float32_optimizer_bit_for_bit():
    grads = _grads(3)
    mp, params, applied = _mp_run(grads)
    ref = _params()
    opt = AdamW(ref, lr=0.01)
    for gs in grads:
        for p, g in zip(ref, gs):
            p.grad = g
        opt.step()
    assert applied == [True] * 3
    for p, m, r in zip(params, mp.masters, ref):
        assert m.data.dtype == np.float32 and np.array_equal(m.data, r.data)
        assert p.data.dtype == BF16
        assert np.array_equal(p.data.view(np.uint16), r.data.astype(BF16).view(np.uint16))
    assert mp.launches == 6 and mp.optimizer.launches == 3  # per step: norm, update, cast


def test_a_step_with_an_inf_gradient_is_skipped_and_the_scale_backs_off():
    grads = _grads(3)
    mp, params, applied = _mp_run(grads, poison=(1, 2))
    assert applied == [True, False, True]
    assert mp.scaler.scale == 2.0 ** 15 and mp.scaler.skipped_steps == 1
    assert all(mp.optimizer.state[m]["step"] == 2 for m in mp.masters)
    # the same as training on the two clean steps alone
    ref, _, _ = _mp_run([grads[0], grads[2]])
    for m, r in zip(mp.masters, ref.masters):
        assert np.array_equal(m.data, r.data)


def test_inf_gradients_without_loss_scaling_are_an_error():
    with pytest.raises(OptimizerError, match="inf or NaN and loss scaling is off"):
        _mp_run(_grads(1), scaler=DynamicLossScaler(enabled=False), poison=(0, 0))


def test_clipping_uses_the_unscaled_global_norm():
    grads = [g * 10 for g in _grads(1)[0]]
    want = math.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    plain, _, _ = _mp_run([grads])
    assert abs(plain.last_norm - want) <= 1e-12 * want
    clipped = MixedPrecision(_params(), AdamW, lr=0.01)
    for p, g in zip(clipped.params, grads):
        p.grad = g * np.float32(clipped.scaler.scale)
    clipped.step(clip_grad_norm=1.0)
    # the first moment is (1 - beta1) * g: scaled by max_norm / norm after clipping
    got = clipped.optimizer.state[clipped.masters[2]]["exp_avg"]
    unclipped = plain.optimizer.state[plain.masters[2]]["exp_avg"]
    assert np.allclose(got, unclipped / (want + 1e-6), rtol=1e-6, atol=0)


def test_state_round_trip_and_policies():
    grads = _grads(4)
    ref, ref_params, _ = _mp_run(grads)
    first, params, _ = _mp_run(grads[:2])
    state = first.state_dict()
    again = MixedPrecision(_params(seed=5), AdamW, lr=0.01)
    again.load_state_dict(state)
    for gs in grads[2:]:
        for p, g in zip(again.params, gs):
            p.grad = g * np.float32(again.scaler.scale)
        again.step()
    for p, r in zip(again.params, ref_params):
        assert np.array_equal(p.data.view(np.uint16), r.data.view(np.uint16))
    with pytest.raises(OptimizerError, match="the policy stores float8_e4m3fn"):
        MixedPrecision(_params(), AdamW, policy="fp8")
    fp16 = MixedPrecision(_params(), AdamW, policy="fp16")
    assert fp16.params[0].data.dtype == np.float16


def test_interpreter_and_jit_give_the_same_bits():
    out = []
    for backend in ("interp", "jit"):
        with tilepy.backend(backend):
            mp, params, applied = _mp_run(_grads(3), poison=(1, 0))
        out.append([p.data.view(np.uint16).copy() for p in params] +
                   [m.data.copy() for m in mp.masters])
    assert all(np.array_equal(a, b) for a, b in zip(*out))
