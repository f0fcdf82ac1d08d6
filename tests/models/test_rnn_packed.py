"""Bidirectional and packed LSTM/GRU (interpreter, float64): the recurrence over sequences
of different lengths, in either direction, against a numpy run of each sequence alone and
float64 central differences; modules against torch's layout (parameter names and shapes,
h_n order) and, when torch is installed, torch itself; nn.utils.rnn's packing rules."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tests.models.test_recurrent import _numpy
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.nn.recurrent import recurrence
from tilepy.models.nn.utils import rnn

F = nn.functional


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _alone(kind, x, h, c, w, lengths, reverse):
    """Each sequence run alone for its own length (reversed in time with `reverse`):
    the states (T, N, H) with zeros past the length, and the final h and c."""
    steps, n, hid = x.shape[0], x.shape[1], h.shape[1]
    out, hn, cn = np.zeros((steps, n, hid)), np.zeros((n, hid)), np.zeros((n, hid))
    for b, length in enumerate(lengths):
        xb = x[:length, b:b + 1][::-1] if reverse else x[:length, b:b + 1]
        seq, hn[b], cb = _numpy(kind, xb, h[b:b + 1], c[b:b + 1], *w)
        out[:length, b] = (seq[::-1] if reverse else seq)[:, 0]
        cn[b] = cb[0]
    return out, hn, cn


def _arrays(kind, seed, steps=3, n=3, i=2, h=2):
    rng = np.random.default_rng(seed)
    g = {"lstm": 4, "gru": 3}[kind] * h
    return [rng.standard_normal(s) * 0.7 for s in
            [(steps, n, i), (n, h), (n, h), (g, i), (g, h), (g,), (g,)]]


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("reverse", [False, True])
def test_packed_recurrence_matches_each_sequence_alone(kind, reverse):
    x, h0, c0, *w = _arrays(kind, 1)
    lengths, sizes = [3, 2, 1], np.array([3, 2, 1])
    gi = F.linear(Tensor(x), Tensor(w[0]), Tensor(w[2]))
    got = recurrence(kind, gi, Tensor(h0), Tensor(c0) if kind == "lstm" else None,
                     Tensor(w[1]), Tensor(w[3]), sizes, reverse).data
    want, hn, cn = _alone(kind, x, h0, c0, w, lengths, reverse)
    np.testing.assert_allclose(got[:3, :, :2], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[3, :, :2], hn, rtol=1e-12)
    if kind == "lstm":
        np.testing.assert_allclose(got[3, :, 2:], cn, rtol=1e-12)


@pytest.mark.parametrize("kind,reverse", [
    ("lstm", True), ("gru", False),
    pytest.param("lstm", False, marks=pytest.mark.exhaustive),
    pytest.param("gru", True, marks=pytest.mark.exhaustive)])
def test_packed_recurrence_gradients_match_finite_differences(kind, reverse):
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = _arrays(kind, 2, steps=3, n=2, i=1)
    sizes = np.array([2, 1, 1])

    def run(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        return recurrence(kind, F.linear(x, w_ih, b_ih), h0, c0, w_hh, b_hh, sizes, reverse)
    if kind == "lstm":
        check(run, x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    else:
        check(lambda x, h0, *w: run(x, h0, None, *w), x, h0, w_ih, w_hh, b_ih, b_hh)


def _torch_names(num_layers, bidirectional, bias=True):
    names = []
    for k in range(num_layers):
        for sfx in ["", "_reverse"][:1 + bidirectional]:
            names += [f"weight_ih_l{k}{sfx}", f"weight_hh_l{k}{sfx}"]
            names += [f"bias_ih_l{k}{sfx}", f"bias_hh_l{k}{sfx}"] if bias else []
    return names


@pytest.mark.parametrize("cls,gates", [(nn.LSTM, 4), (nn.GRU, 3)])
def test_state_dict_has_torchs_names_and_shapes(cls, gates):
    m = cls(3, 5, num_layers=2, bidirectional=True)
    sd = m.state_dict()
    assert list(sd) == _torch_names(2, True)
    assert sd["weight_ih_l0"].shape == sd["weight_ih_l0_reverse"].shape == (gates * 5, 3)
    assert sd["weight_ih_l1_reverse"].shape == (gates * 5, 10)  # both directions feed in
    assert sd["weight_hh_l1"].shape == (gates * 5, 5) and sd["bias_hh_l1"].shape == (gates * 5,)
    assert list(cls(3, 5, bias=False).state_dict()) == ["weight_ih_l0", "weight_hh_l0"]
    torch = _torch()
    if torch is not None:
        t = getattr(torch.nn, cls.__name__)(3, 5, num_layers=2, bidirectional=True)
        assert {k: tuple(v.shape) for k, v in t.state_dict().items()} == \
            {k: v.shape for k, v in sd.items()}


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _bidir_numpy(kind, m, x, lengths):
    """torch's bidirectional stack in numpy: outputs (T, N, 2H), h_n and c_n (2L, N, H)."""
    p = {k: v.data for k, v in m.named_parameters()}
    n, hid = x.shape[1], m.hidden_size
    hs, cs = [], []
    for k in range(m.num_layers):
        outs = []
        for d, sfx in enumerate([f"_l{k}", f"_l{k}_reverse"]):
            w = [p[f"{a}{sfx}"] for a in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            o, hn, cn = _alone(kind, x, np.zeros((n, hid)), np.zeros((n, hid)), w, lengths,
                               d == 1)
            outs.append(o)
            hs.append(hn)
            cs.append(cn)
        x = np.concatenate(outs, axis=2)
    return x, np.stack(hs), np.stack(cs)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_bidirectional_packed_module_matches_numpy(cls):
    kind = "lstm" if cls is nn.LSTM else "gru"
    nn.manual_seed(3)
    m = cls(2, 3, num_layers=2, bidirectional=True, dtype=np.float64)
    x = np.random.default_rng(4).standard_normal((4, 3, 2))
    lengths = [2, 4, 3]  # unsorted: the module sorts, runs, and restores the order
    packed = rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, state = m(packed)
    assert isinstance(out, rnn.PackedSequence)
    y, got_lengths = rnn.pad_packed_sequence(out)
    want, hn, cn = _bidir_numpy(kind, m, x, lengths)
    np.testing.assert_array_equal(got_lengths, lengths)
    np.testing.assert_allclose(y.data, want, rtol=1e-12, atol=1e-15)
    h = state[0] if kind == "lstm" else state
    np.testing.assert_allclose(h.data, hn, rtol=1e-12)
    if kind == "lstm":
        np.testing.assert_allclose(state[1].data, cn, rtol=1e-12)
    full, _ = m(x)  # unpacked: every sequence runs the full 4 steps
    np.testing.assert_allclose(full.data, _bidir_numpy(kind, m, x, [4, 4, 4])[0], rtol=1e-12)
    torch = _torch()
    if torch is not None:  # the same weights and packed batch through torch
        t = getattr(torch.nn, cls.__name__)(2, 3, num_layers=2, bidirectional=True).double()
        t.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
        tp = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), lengths,
                                                     enforce_sorted=False)
        tout, tstate = t(tp)
        np.testing.assert_allclose(tout.data.detach().numpy(), out.data.data, rtol=1e-10)
        th = tstate[0] if kind == "lstm" else tstate
        np.testing.assert_allclose(th.detach().numpy(), h.data, rtol=1e-10)
        h0 = np.random.default_rng(7).standard_normal((4, 3, 3))  # given in batch order
        hx = (h0, 0.5 * h0) if kind == "lstm" else h0
        thx = tuple(map(torch.from_numpy, hx)) if kind == "lstm" else torch.from_numpy(h0)
        ours, tout = m(packed, hx)[1], t(tp, thx)[1]
        for a, b in zip(ours if kind == "lstm" else [ours], tout if kind == "lstm" else [tout]):
            np.testing.assert_allclose(b.detach().numpy(), a.data, rtol=1e-10)
        w = np.random.default_rng(8).standard_normal(out.data.shape)  # parameter gradients
        (out.data * Tensor(w)).sum().backward()
        (t(tp)[0].data * torch.from_numpy(w)).sum().backward()
        for (name, p), (tname, tp_) in zip(m.named_parameters(), t.named_parameters()):
            assert name == tname
            np.testing.assert_allclose(p.grad, tp_.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_packed_module_gradients_match_finite_differences():
    nn.manual_seed(5)
    m = nn.LSTM(1, 2, bidirectional=True, batch_first=True, dtype=np.float64)
    x = np.random.default_rng(6).standard_normal((2, 3, 1))

    def run(x, h0):
        packed = rnn.pack_padded_sequence(x, [2, 3], batch_first=True, enforce_sorted=False)
        out, (hn, _) = m(packed, (h0, Tensor(np.zeros((2, 2, 2)))))
        y, _ = rnn.pad_packed_sequence(out, batch_first=True)
        return F.tanh(y).sum() + (hn * hn).sum()
    check(lambda x, h0: run(x, h0).reshape((1,)), x, np.full((2, 2, 2), 0.3))


def test_pack_and_pad_follow_torchs_rules():
    x = np.arange(12.0).reshape(4, 3, 1)  # (T, B, 1): x[t, b] = 3t + b
    p = rnn.pack_padded_sequence(x, [2, 4, 3], enforce_sorted=False)
    np.testing.assert_array_equal(p.batch_sizes, [3, 3, 2, 1])
    np.testing.assert_array_equal(p.sorted_indices, [1, 2, 0])
    np.testing.assert_array_equal(p.unsorted_indices, [2, 0, 1])
    np.testing.assert_array_equal(p.data.data[:, 0], [1, 2, 0, 4, 5, 3, 7, 8, 10])
    y, lengths = rnn.pad_packed_sequence(p, total_length=5, padding_value=-1.0)
    assert y.shape == (5, 3, 1) and list(lengths) == [2, 4, 3]
    assert y.data[2, 0, 0] == -1.0 and y.data[3, 1, 0] == 10.0 and y.data[4, 1, 0] == -1.0
    s = rnn.pack_sequence([Tensor(np.ones((3, 1))), Tensor(np.ones((1, 1)))])
    np.testing.assert_array_equal(s.batch_sizes, [2, 1, 1])
    assert s.sorted_indices is None
    with pytest.raises(ModelError, match=r"lengths \[2, 4, 3\] are not in decreasing order"):
        rnn.pack_padded_sequence(x, [2, 4, 3])
    with pytest.raises(ModelError, match=r"lengths must be in \[1, 4\]"):
        rnn.pack_padded_sequence(x, [5, 4, 3])
    with pytest.raises(ModelError, match=r"total_length=2 is shorter"):
        rnn.pad_packed_sequence(p, total_length=2)


def test_bidirectional_state_errors_and_dropout():
    m = nn.GRU(3, 4, num_layers=2, bidirectional=True, dropout=0.5)
    with pytest.raises(ModelError, match=r"expected h0 of shape \(4, 2, 4\); got \(2, 2, 4\)"):
        m(np.zeros((5, 2, 3), np.float32), np.zeros((2, 2, 4), np.float32))
    assert "bidirectional=True" in repr(m)
    m.eval()  # no dropout between the layers in eval mode: the same output twice
    a, _ = m(np.ones((5, 2, 3), np.float32))
    np.testing.assert_array_equal(a.data, m(np.ones((5, 2, 3), np.float32))[0].data)
    assert a.shape == (5, 2, 8)
