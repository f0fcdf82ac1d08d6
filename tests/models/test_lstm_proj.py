"""LSTM with proj_size (interpreter, float64): h_t = W_hr (o_t * tanh(c_t)) against a
float64 numpy run of torch's equations (each packed sequence alone, either direction, two
bidirectional layers), gradients against central differences, torch's parameter names and
shapes (a torch state_dict loads), and, when torch is installed, torch itself."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.nn.recurrent import recurrence
from tilepy.models.nn.utils import rnn

F = nn.functional
WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lstm(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr):
    """torch's projected LSTM equations over x (T, N, I): states (T, N, P), h_n, c_n."""
    out = []
    for xt in x:
        i, f, g, o = np.split(xt @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        h = (_sig(o) * np.tanh(c)) @ w_hr.T
        out.append(h)
    return np.stack(out), h, c


def _alone(x, w, lengths, reverse, hid, proj):
    """Each sequence alone for its own length (reversed in time with `reverse`) from zero
    states: outputs (T, N, P) with zeros past the length, final h and c."""
    steps, n = x.shape[:2]
    out, hn, cn = np.zeros((steps, n, proj)), np.zeros((n, proj)), np.zeros((n, hid))
    for b, length in enumerate(lengths):
        xb = x[:length, b:b + 1][::-1] if reverse else x[:length, b:b + 1]
        seq, h, c = _lstm(xb, np.zeros((1, proj)), np.zeros((1, hid)), *w)
        out[:length, b] = (seq[::-1] if reverse else seq)[:, 0]
        hn[b], cn[b] = h[0], c[0]
    return out, hn, cn


def _arrays(seed, steps=3, n=2, i=2, h=3, p=2):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) * 0.7 for s in
            [(steps, n, i), (n, p), (n, h), (4 * h, i), (4 * h, p), (4 * h,), (4 * h,),
             (p, h)]]


def _run(sizes, reverse):
    def run(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr):
        return recurrence("lstm", F.linear(x, w_ih, b_ih), h0, c0, w_hh, b_hh, sizes,
                          reverse, w_hr)
    return run


def test_projected_recurrence_matches_numpy():
    x, h0, c0, *w = _arrays(0)
    got = _run(None, False)(*map(Tensor, [x, h0, c0, *w])).data
    want, hn, cn = _lstm(x, h0, c0, *w)
    assert got.shape == (4, 2, 2 + 3)  # rows: 3 steps and the final state; h (P) then c (H)
    np.testing.assert_allclose(got[:3, :, :2], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[3, :, :2], hn, rtol=1e-12)
    np.testing.assert_allclose(got[3, :, 2:], cn, rtol=1e-12)
    packed = _run(np.array([2, 2, 1]), True)(*map(Tensor, [x, 0 * h0, 0 * c0, *w])).data
    want, hn, cn = _alone(x, w, [3, 2], True, 3, 2)
    np.testing.assert_allclose(packed[:3, :, :2], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(packed[3, :, :2], hn, rtol=1e-12)
    np.testing.assert_allclose(packed[3, :, 2:], cn, rtol=1e-12)


@pytest.mark.parametrize("sizes,reverse", [
    (np.array([2, 1, 1]), True), pytest.param(None, False, marks=pytest.mark.exhaustive)])
def test_projected_recurrence_gradients_match_finite_differences(sizes, reverse):
    check(_run(sizes, reverse), *_arrays(1, steps=3, n=2, i=1, h=2, p=1))


def _torch_names(layers, directions):
    return [f"{w}_l{k}{sfx}" for k in range(layers)
            for sfx in ["", "_reverse"][:directions] for w in WEIGHTS]


def test_state_dict_has_torchs_names_shapes_and_initial_range():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)
    sd = m.state_dict()
    assert list(sd) == _torch_names(2, 2)
    assert sd["weight_hh_l0"].shape == (20, 2) and sd["weight_hr_l0"].shape == (2, 5)
    assert sd["weight_ih_l1_reverse"].shape == (20, 4)  # both directions' P-wide h feed in
    assert all(np.abs(v).max() <= 1 / np.sqrt(5) for v in sd.values())
    assert "proj_size=2" in repr(m)
    assert list(nn.LSTM(3, 5, bias=False, proj_size=1).state_dict()) == [
        "weight_ih_l0", "weight_hh_l0", "weight_hr_l0"]


def _stack(m, x, lengths):
    """The bidirectional projected stack in numpy: outputs (T, N, 2P), h_n, c_n."""
    p = {k: v.data for k, v in m.named_parameters()}
    hs, cs = [], []
    for k in range(m.num_layers):
        outs = []
        for d, sfx in enumerate([f"_l{k}", f"_l{k}_reverse"]):
            o, hn, cn = _alone(x, [p[w + sfx] for w in WEIGHTS], lengths, d == 1,
                               m.hidden_size, m.proj_size)
            outs.append(o)
            hs.append(hn)
            cs.append(cn)
        x = np.concatenate(outs, axis=2)
    return x, np.stack(hs), np.stack(cs)


def test_bidirectional_packed_projected_module_matches_numpy_and_torch():
    nn.manual_seed(3)
    m = nn.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=2, dtype=np.float64)
    x = np.random.default_rng(4).standard_normal((4, 3, 2))
    lengths = [2, 4, 3]
    packed = rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, (hn, cn) = m(packed)
    y, _ = rnn.pad_packed_sequence(out)
    want, whn, wcn = _stack(m, x, lengths)
    assert y.shape == (4, 3, 4) and hn.shape == (4, 3, 2) and cn.shape == (4, 3, 3)
    np.testing.assert_allclose(y.data, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(hn.data, whn, rtol=1e-12)
    np.testing.assert_allclose(cn.data, wcn, rtol=1e-12)
    try:
        import torch
    except ImportError:
        return
    t = torch.nn.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=2).double()
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})  # torch's names
    out, (hn, cn) = m(packed)
    tp = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), lengths,
                                                 enforce_sorted=False)
    h0 = np.random.default_rng(5).standard_normal((4, 3, 2))  # in the caller's batch order
    c0 = np.random.default_rng(6).standard_normal((4, 3, 3))
    tout, (thn, tcn) = t(tp, (torch.from_numpy(h0), torch.from_numpy(c0)))
    out, (hn, cn) = m(packed, (h0, c0))
    for a, b in [(out.data, tout.data), (hn, thn), (cn, tcn)]:
        np.testing.assert_allclose(a.data, b.detach().numpy(), rtol=1e-10, atol=1e-14)
    w = np.random.default_rng(7).standard_normal(out.data.shape)
    ((out.data * Tensor(w)).sum() + (hn * hn).sum() + cn.sum()).backward()
    ((tout.data * torch.from_numpy(w)).sum() + (thn * thn).sum() + tcn.sum()).backward()
    for (name, p), (tname, q) in zip(m.named_parameters(), t.named_parameters()):
        assert name == tname
        np.testing.assert_allclose(p.grad, q.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_projected_module_gradients_reach_the_input_and_states():
    nn.manual_seed(8)
    m = nn.LSTM(1, 2, proj_size=1, batch_first=True, dtype=np.float64)

    def run(x, h0, c0):
        y, (hn, cn) = m(x, (h0, c0))
        return F.tanh(y).sum() + (hn * cn).sum()
    rng = np.random.default_rng(9)
    check(lambda *a: run(*a).reshape((1,)), rng.standard_normal((2, 3, 1)),
          rng.standard_normal((1, 2, 1)), rng.standard_normal((1, 2, 2)))


def test_proj_size_errors():
    with pytest.raises(ModelError, match=r"LSTM: proj_size must be an integer in "
                                         r"\[0, hidden_size=4\); got 4"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ModelError, match=r"GRU: proj_size is only supported by LSTM"):
        nn.GRU(3, 4, proj_size=2)
    m = nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ModelError, match=r"expected h0 of shape \(1, 2, 2\); got \(1, 2, 4\)"):
        m(np.zeros((5, 2, 3), np.float32), (np.zeros((1, 2, 4), np.float32),
                                            np.zeros((1, 2, 4), np.float32)))
    with pytest.raises(ModelError, match=r"expected c0 of shape \(1, 2, 4\); got \(1, 2, 2\)"):
        m(np.zeros((5, 2, 3), np.float32), (np.zeros((1, 2, 2), np.float32),
                                            np.zeros((1, 2, 2), np.float32)))
