"""LSTM and GRU (interpreter): outputs against a float64 numpy implementation of
PyTorch's equations, backward through time against float64 central differences, the
module API (layers, batch_first, states in and out) and its input errors."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.nn.recurrent import recurrence

F = nn.functional


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy(kind, x, h, c, w_ih, w_hh, b_ih, b_hh):
    """Torch's equations, one direction and layer: hidden states (T, N, H), h_n, c_n."""
    out = []
    for xt in x:
        gi, gh = xt @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        if kind == "lstm":
            i, f, g, o = np.split(gi + gh, 4, axis=1)
            c = _sig(f) * c + _sig(i) * np.tanh(g)
            h = _sig(o) * np.tanh(c)
        else:
            (ir, iz, i_n), (hr, hz, hn) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
            r, z = _sig(ir + hr), _sig(iz + hz)
            h = (1 - z) * np.tanh(i_n + r * hn) + z * h
        out.append(h)
    return np.stack(out), h, c


def _arrays(kind, seed, steps=2, n=2, i=1, h=2):
    rng = np.random.default_rng(seed)
    g = {"lstm": 4, "gru": 3}[kind] * h
    return [rng.standard_normal(s) * 0.7 for s in
            [(steps, n, i), (n, h), (n, h), (g, i), (g, h), (g,), (g,)]]


def _layer(kind):
    def run(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        out = recurrence(kind, F.linear(x, w_ih, b_ih), h0, c0 if kind == "lstm" else None,
                         w_hh, b_hh)
        return out
    return run


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrence_matches_numpy_and_finite_differences(kind):
    a = _arrays(kind, 0)
    want, _, c = _numpy(kind, *a)
    got = _layer(kind)(*[Tensor(v) for v in a]).data
    np.testing.assert_allclose(got[:-1, :, :2], want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(got[-1], got[-2])  # the final state row
    if kind == "lstm":
        np.testing.assert_allclose(got[-1, :, 2:], c, rtol=1e-12)
    if kind == "gru":
        run = _layer(kind)
        check(lambda x, h0, w_ih, w_hh, b_ih, b_hh: run(x, h0, None, w_ih, w_hh, b_ih, b_hh),
              *(a[:2] + a[3:]))
    else:
        check(_layer(kind), *a)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_modules_two_layers_batch_first_and_states(cls):
    nn.manual_seed(0)
    m = cls(3, 4, num_layers=2, batch_first=True, dtype=np.float64)
    x = np.random.default_rng(1).standard_normal((2, 5, 3))
    y, state = m(x)
    kind = "lstm" if cls is nn.LSTM else "gru"
    p = {k: v.data for k, v in m.named_parameters()}
    h = x.transpose(1, 0, 2)
    for k in range(2):
        h, hn, cn = _numpy(kind, h, np.zeros((2, 4)), np.zeros((2, 4)), p[f"weight_ih_l{k}"],
                           p[f"weight_hh_l{k}"], p[f"bias_ih_l{k}"], p[f"bias_hh_l{k}"])
        got_h = state[0].data[k] if kind == "lstm" else state.data[k]
        np.testing.assert_allclose(got_h, hn, rtol=1e-12)
        if kind == "lstm":
            np.testing.assert_allclose(state[1].data[k], cn, rtol=1e-12)
    np.testing.assert_allclose(y.data, h.transpose(1, 0, 2), rtol=1e-12)
    assert y.shape == (2, 5, 4)
    (y.sum() + (state[1] if kind == "lstm" else state).sum()).backward()
    assert all(np.any(q.grad != 0) for q in m.parameters())


def test_state_in_continues_the_sequence():
    nn.manual_seed(2)
    m = nn.LSTM(2, 3, dtype=np.float64)
    x = np.random.default_rng(3).standard_normal((6, 1, 2))
    whole, _ = m(x)
    first, state = m(x[:4])
    rest, _ = m(x[4:], state)
    np.testing.assert_array_equal(whole.data[4:], rest.data)


def test_recurrent_input_errors():
    m = nn.GRU(3, 4, batch_first=True, bias=False)
    with pytest.raises(ModelError, match=r"expected input of shape \(N, T, input_size\) "
                                         r"with input_size=3; got \(2, 5, 4\)"):
        m(np.zeros((2, 5, 4), np.float32))
    with pytest.raises(ModelError, match=r"expected h0 of shape \(1, 2, 4\); got \(2, 4\)"):
        m(np.zeros((2, 5, 3), np.float32), np.zeros((2, 4), np.float32))
    assert m(np.zeros((2, 5, 3), np.float32))[0].shape == (2, 5, 4)
