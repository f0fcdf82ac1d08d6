"""Optimisers (tilepy.models.optim): each update against a float64 re-derivation of
torch's documented formula, the flat layout (one launch per dtype), state round trips,
interp == JIT bit for bit, and torch CPU as an optional comparator."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Parameter
from tilepy.models.optim import SGD, Adam, AdamW, clip_grad_norm_
from tilepy.models.training.errors import OptimizerError

EPS32 = 2.0 ** -23
SHAPES = [(3, 5), (5,), (1100,)]  # the last one spans two kernel blocks


def _params(seed=0, shapes=SHAPES, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(dtype)) for s in shapes]


def _grads(steps, seed=1, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]


def _run(opt, params, grads):
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = g.copy()
        opt.step()


# ------------------------------------------------------------------ float64 re-derivations


def ref_sgd(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
            maximize=False):
    p, b = p.astype(np.float64), None
    for t, g in enumerate(grads, 1):
        g = -g.astype(np.float64) if maximize else g.astype(np.float64)
        g = g + weight_decay * p
        if momentum:
            b = g if t == 1 else momentum * b + (1 - dampening) * g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
    return p


def ref_adam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    p = p.astype(np.float64)
    m = v = np.zeros_like(p)
    b1, b2 = betas
    for t, g in enumerate(grads, 1):
        g = g.astype(np.float64)
        if decoupled:
            p = p - lr * weight_decay * p
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p


def _close(got, want, steps, scale):
    """float32 result vs the float64 formula: a few roundings per step, each within half an
    ulp of the magnitudes involved."""
    bound = 8 * steps * EPS32 * (np.abs(want) + scale)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)


SGD_CASES = [dict(lr=0.1), dict(lr=0.1, weight_decay=0.05),
             dict(lr=0.05, momentum=0.9, dampening=0.1),
             dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
             dict(lr=0.05, momentum=0.5, maximize=True)]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_matches_the_formula(kw):
    params, grads = _params(), _grads(4)
    init = [p.data.copy() for p in params]
    _run(SGD(params, **kw), params, grads)
    for k, p in enumerate(params):
        want = ref_sgd(init[k], [g[k] for g in grads], **kw)
        _close(p.data, want, 4, kw["lr"])


@pytest.mark.parametrize("cls,kw", [(Adam, dict(lr=0.1)),
                                    (Adam, dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1)),
                                    (AdamW, dict(lr=0.05, weight_decay=0.2)),
                                    (AdamW, dict(lr=0.01, betas=(0.3, 0.9), eps=1e-3))])
def test_adam_and_adamw_match_the_formula(cls, kw):
    params, grads = _params(), _grads(4)
    init = [p.data.copy() for p in params]
    _run(cls(params, **kw), params, grads)
    for k, p in enumerate(params):
        wd = kw.get("weight_decay", 0.01 if cls is AdamW else 0.0)  # torch's defaults
        want = ref_adam(init[k], [g[k] for g in grads], decoupled=cls is AdamW,
                        **{**kw, "weight_decay": wd})
        _close(p.data, want, 4, kw["lr"])


def test_adam_follows_torchs_float32_operation_order_bit_for_bit():
    # lerp for the first moment, sqrt(v) / sqrt(bc2) + eps, p + (-step_size * m) / denom
    p0 = _params(shapes=[(700,)])[0].data.copy()
    (p,) = params = [Parameter(p0.copy())]
    grads = _grads(3, shapes=[(700,)])
    _run(Adam(params, lr=0.01, weight_decay=0.1), params, grads)
    f = np.float32
    q, m, v = p0.copy(), np.zeros(700, f), np.zeros(700, f)
    for t, (g,) in enumerate(grads, 1):
        g = g + f(0.1) * q
        m = m + f(0.1) * (g - m)
        v = v * f(0.999) + (f(1 - 0.999) * g) * g
        denom = np.sqrt(v) / f(np.sqrt(1 - 0.999 ** t)) + f(1e-8)
        q = q + (f(-(0.01 / (1 - 0.9 ** t))) * m) / denom
    assert np.array_equal(p.data, q)


def test_parameters_without_gradients_are_left_alone():
    params = _params()
    before = params[1].data.copy()
    opt = Adam(params, lr=0.1)
    params[0].grad = np.ones(SHAPES[0], np.float32)
    params[2].grad = np.ones(SHAPES[2], np.float32)
    opt.step()
    assert np.array_equal(params[1].data, before)
    assert [opt.state[p]["step"] for p in params] == [1, 0, 1]
    assert not np.array_equal(params[0].data, _params()[0].data)


def test_one_launch_per_dtype_and_step_with_param_groups():
    p32, p64 = _params(), _params(dtype=np.float64, shapes=[(4, 4)])
    opt = SGD([{"params": p32[:2], "lr": 0.5}, {"params": p32[2:] + p64}], lr=0.1,
              momentum=0.9)
    grads = _grads(2)
    for gs in grads:
        for p, g in zip(p32, gs):
            p.grad = g
        p64[0].grad = np.ones((4, 4))
        opt.step()
    assert opt.launches == 4  # 2 steps x 2 dtypes
    assert p64[0].data.dtype == np.float64
    # the groups' learning rates were applied per parameter inside one launch
    init = _params()
    _close(p32[0].data, ref_sgd(init[0].data, [g[0] for g in grads], 0.5, 0.9), 2, 0.5)
    _close(p32[2].data, ref_sgd(init[2].data, [g[2] for g in grads], 0.1, 0.9), 2, 0.1)


def test_parameters_become_views_of_one_flat_buffer_per_dtype():
    params = _params()
    opt = AdamW(params)
    _run(opt, params, _grads(1))
    (bucket,) = opt._buckets
    for p, off in zip(params, bucket.offsets):
        assert np.shares_memory(p.data, bucket.data) and off % opt.block == 0
    # a model that replaces .data (e.g. load_state_dict) is re-attached at the next step
    params[0].data = np.full(SHAPES[0], 2.0, np.float32)
    _run(opt, params, _grads(1))
    assert np.shares_memory(params[0].data, bucket.data)
    assert np.all(np.abs(params[0].data - 2.0) < 0.01)


def test_sharded_steps_together_equal_the_whole_step():
    # ZeRO-1: each of 3 ranks updates its run of blocks; the runs assemble the full update
    shapes = [(40, 60), (60,), (1500,), (7, 3)]
    grads = _grads(2, shapes=shapes)
    full = _params(shapes=shapes)
    opt = Adam(full, lr=0.01, weight_decay=0.1)
    _run(opt, full, grads)
    (bucket,) = opt._buckets
    runs = []
    for rank in range(3):
        params = _params(shapes=shapes)
        ropt = Adam(params, lr=0.01, weight_decay=0.1)
        for gs in grads:
            for p, g in zip(params, gs):
                p.grad = g.copy()
            ropt.step(shard=(rank, 3))
        lo, hi = ropt._buckets[0].shard(rank, 3)
        assert lo % opt.block == 0 and hi % opt.block == 0
        runs.append(ropt._buckets[0].data[lo:hi])
    assert np.array_equal(np.concatenate(runs), bucket.data)
    assert sum(len(r) for r in runs) == bucket.size and all(len(r) for r in runs)


def test_zero_grad_keeps_in_place_gradient_views():
    params = _params()
    opt = SGD(params, lr=1.0)
    _run(opt, params, _grads(1))
    opt.zero_grad(set_to_none=False)
    assert all(np.all(p.grad == 0) for p in params)
    before = [p.data.copy() for p in params]
    for p in params:
        p.grad += 1.0  # a backward pass accumulating into the buffer
    opt.step()
    assert all(np.array_equal(p.data, b - 1.0) for p, b in zip(params, before))
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("cls,kw", [(SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
                                    (AdamW, dict(lr=0.01))])
def test_state_dict_resume_is_bit_identical(cls, kw):
    grads = _grads(5)
    ref = _params()
    _run(cls(ref, **kw), ref, grads)
    params = _params()
    first = cls(params, **kw)
    _run(first, params, grads[:2])
    saved, weights = first.state_dict(), [p.data.copy() for p in params]
    _run(first, params, grads[2:3])  # later steps must not change what was saved
    resumed = [Parameter(w) for w in weights]
    second = cls(resumed, **kw)
    second.load_state_dict(saved)
    _run(second, resumed, grads[2:])
    assert all(np.array_equal(a.data, b.data) for a, b in zip(resumed, ref))


def test_a_group_added_later_keeps_the_state_of_the_first():
    grads = _grads(3)
    ref = _params()
    _run(Adam(ref, lr=0.05), ref, grads)
    params = _params()
    opt = Adam(params[:2], lr=0.05)
    _run(opt, params[:2], [g[:2] for g in grads[:1]])
    opt.add_param_group({"params": params[2:]})  # rebuilds the flat buffers
    for gs in grads[1:]:
        for p, g in zip(params, gs):
            p.grad = g.copy()
        opt.step()
    assert np.array_equal(params[0].data, ref[0].data)  # its moments were carried over
    assert [opt.state[p]["step"] for p in params] == [3, 3, 2]


def test_load_state_dict_of_another_model_is_refused():
    opt = Adam(_params())
    other = Adam(_params(shapes=[(2,)]))
    with pytest.raises(OptimizerError, match=r"groups have \[1\] parameters.*\[3\]"):
        opt.load_state_dict(other.state_dict())
    params = _params(shapes=[(3, 5), (5,), (9,)])  # same count, one shape differs
    other = Adam(params, lr=0.5)
    _run(other, params, _grads(1, shapes=[(3, 5), (5,), (9,)]))
    with pytest.raises(OptimizerError, match=r"'exp_avg' of parameter 2 has shape \(9,\); the "
                                             r"parameter has \(1100,\)"):
        opt.load_state_dict(other.state_dict())
    assert opt.param_groups[0]["lr"] == 1e-3  # nothing was changed


def test_loading_a_state_before_any_step_restarts_momentum():
    params, grads = _params(), _grads(3)
    opt = SGD(params, lr=0.1, momentum=0.9, dampening=0.5)
    fresh_state = opt.state_dict()
    _run(opt, params, grads[:2])
    opt.load_state_dict(fresh_state)  # no momentum buffers: the next step starts them
    start = [p.data.copy() for p in params]
    _run(opt, params, grads[2:])
    for k, p in enumerate(params):
        _close(p.data, ref_sgd(start[k], [grads[2][k]], 0.1, 0.9, 0.5), 1, 0.1)


@pytest.mark.parametrize("make,msg", [
    (lambda: SGD([], lr=0.1), "empty parameter list"),
    (lambda: SGD(_params(), lr=-1), "learning rate must be >= 0; got -1"),
    (lambda: SGD(_params(), lr=0.1, nesterov=True), "Nesterov momentum needs momentum > 0"),
    (lambda: Adam(_params(), betas=(0.9, 1.0)), r"betas must lie in \[0, 1\)"),
    (lambda: SGD([np.zeros(3)], lr=0.1), "takes Parameters"),
])
def test_bad_arguments_are_clear_errors(make, msg):
    with pytest.raises(OptimizerError, match=msg) as err:
        make()
    assert "test_optim.py" in str(err.value)  # the message names the user's line


def test_a_gradient_of_the_wrong_shape_is_named():
    params = _params()
    opt = SGD(params, lr=0.1)
    for p in params:
        p.grad = np.zeros(p.shape, np.float32)
    params[1].grad = np.zeros(7, np.float32)
    with pytest.raises(OptimizerError, match=r"parameter 1 has shape \(7,\); expected \(5,\)"):
        opt.step()
    # the index is the parameter's place in the optimiser's list, whatever its dtype
    mixed = [Parameter(np.zeros(2)), Parameter(np.zeros(3, np.float32))]
    opt = SGD(mixed, lr=0.1)
    mixed[0].grad, mixed[1].grad = np.zeros(2), np.zeros(4, np.float32)
    with pytest.raises(OptimizerError, match=r"parameter 1 has shape \(4,\); expected \(3,\)"):
        opt.step()


# ------------------------------------------------------------------ clipping


@pytest.mark.parametrize("max_norm", [1.0, 1e3])
def test_clip_grad_norm_by_the_global_norm(max_norm):
    params = _params()
    for p, g in zip(params, _grads(1)[0]):
        p.grad = g * 3
    grads = [p.grad.copy() for p in params]
    want = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    total = clip_grad_norm_(params, max_norm)
    assert abs(total - want) <= 1e-12 * want
    coef = min(1.0, max_norm / (want + 1e-6))
    for p, g in zip(params, grads):
        assert np.array_equal(p.grad, g * np.float32(coef)) if coef < 1 else \
            np.array_equal(p.grad, g)
    if coef < 1:
        assert abs(np.sqrt(sum(np.sum(p.grad.astype(np.float64) ** 2) for p in params))
                   - max_norm) < 1e-5


# ------------------------------------------------------------------ backends and torch


def _all_optimisers(backend):
    out = []
    with tilepy.backend(backend):
        for cls, kw in [(SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
                        (AdamW, dict(lr=0.01)), (Adam, dict(lr=0.01, weight_decay=0.1))]:
            params = _params()
            opt = cls(params, **kw)
            for gs in _grads(3):
                for p, g in zip(params, gs):
                    p.grad = g * 10
                clip_grad_norm_(params, 1.0)
                opt.step()
            out += [p.data.copy() for p in params]
    return out


def test_interpreter_and_jit_give_the_same_bits():
    for a, b in zip(_all_optimisers("interp"), _all_optimisers("jit")):
        assert np.array_equal(a, b)


def test_matches_torch_cpu_when_installed():
    torch = pytest.importorskip("torch")
    grads = _grads(5)
    for cls, tcls, kw in [(SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True,
                                                      weight_decay=0.01)),
                          (Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
                          (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1))]:
        params = _params()
        tparams = [torch.nn.Parameter(torch.from_numpy(p.data.copy())) for p in params]
        _run(cls(params, **kw), params, grads)
        topt = tcls(tparams, foreach=False, **kw)
        for gs in grads:
            for tp, g in zip(tparams, gs):
                tp.grad = torch.from_numpy(g.copy())
            topt.step()
        for p, tp in zip(params, tparams):
            _close(p.data, tp.detach().numpy().astype(np.float64), 5, kw["lr"])
