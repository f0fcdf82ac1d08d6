"""EmbeddingBag (interpreter): values against a numpy loop over the bags, gradients of the
table and of per-sample weights against float64 central differences, the sparse gradient's
rows, and its input errors."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError

F = nn.functional
IDX = np.array([1, 4, 1, 5, 0, 2, 2])
OFFS = np.array([0, 3, 3, 5])  # bags [1, 4, 1], [], [5, 0], [2, 2]


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _reference(w, idx, offs, mode, psw=None):
    ends = list(offs[1:]) + [idx.size]
    out = np.zeros((len(offs), w.shape[1]))
    for b, (s, e) in enumerate(zip(offs, ends)):
        rows = w[idx[s:e]] * (1.0 if psw is None else psw[s:e, None])
        if e > s:
            out[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
    return out


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_values_and_gradient(mode):
    w = np.random.default_rng(0).standard_normal((6, 3))
    got = F.embedding_bag(IDX, Tensor(w), OFFS, mode=mode).data
    np.testing.assert_allclose(got, _reference(w, IDX, OFFS, mode), rtol=1e-12)
    check(lambda w: F.embedding_bag(IDX, w, OFFS, mode=mode), w)


def test_per_sample_weights_gradient_and_two_d_input():
    rng = np.random.default_rng(1)
    w, psw = rng.standard_normal((6, 4)), rng.standard_normal(IDX.size)
    got = F.embedding_bag(IDX, Tensor(w), OFFS, "sum", Tensor(psw)).data
    np.testing.assert_allclose(got, _reference(w, IDX, OFFS, "sum", psw), rtol=1e-12)
    check(lambda w, p: F.embedding_bag(IDX, w, OFFS, "sum", p), w, psw)
    square = np.array([[3, 1, 3], [0, 5, 2]])
    got = F.embedding_bag(square, Tensor(w), mode="mean").data
    np.testing.assert_allclose(got, w[square].mean(1), rtol=1e-12)
    last = F.embedding_bag(IDX, Tensor(w), np.append(OFFS, 7), "max", include_last_offset=True)
    np.testing.assert_array_equal(last.data, F.embedding_bag(IDX, Tensor(w), OFFS, "max").data)


def test_sparse_gradient_rows_and_max_ties():
    w = np.zeros((6, 2))  # every row ties: max takes the bag's first position
    t = Tensor(w, requires_grad=True)
    F.embedding_bag(IDX, t, OFFS, mode="max").sum().backward()
    np.testing.assert_array_equal(t.grad[:, 0], [0, 1, 1, 0, 0, 1])
    t = Tensor(w, requires_grad=True)
    bag = nn.EmbeddingBag(6, 2, mode="sum", dtype=np.float64)
    bag.weight = nn.module.Parameter(w.copy())
    bag(IDX, OFFS).sum().backward()
    np.testing.assert_array_equal(bag.weight.grad[:, 1], [1, 2, 2, 0, 1, 1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(input=IDX), r"1-d input needs offsets"),
    (dict(input=IDX, offsets=[1, 3]), r"offsets must start at 0, not decrease"),
    (dict(input=IDX, offsets=[0, 9]), r"offsets must start at 0"),
    (dict(input=IDX[None], offsets=[0]), r"offsets must be None for 2-d input \(1, 7\)"),
    (dict(input=IDX, offsets=OFFS, mode="min"), r"mode must be 'sum', 'mean' or 'max'"),
    (dict(input=IDX + 1, offsets=OFFS), r"indices must lie in \[0, 6\); got values from 1 to 6"),
    (dict(input=IDX, offsets=OFFS, per_sample_weights=np.ones(7)),
     r"per_sample_weights need mode='sum'; got 'mean'"),
    (dict(input=IDX, offsets=OFFS, mode="sum", per_sample_weights=np.ones(3)),
     r"expected shape \(7,\) dtype float64; got \(3,\) float64"),
])
def test_embedding_bag_errors(kwargs, message):
    with pytest.raises(ModelError, match=message):
        F.embedding_bag(weight=Tensor(np.zeros((6, 2))), **kwargs)


def test_runs_the_library_kernels(monkeypatch):
    # nn.EmbeddingBag's forward and both gradients launch tilepy.kernels.embedding_bag's
    # kernels; the weight gradient is computed for every row of the table
    from tilepy.models.nn import sparse

    calls = []
    real = sparse.launch
    monkeypatch.setattr(sparse, "launch", lambda k, *a: calls.append(
        (k.func.name, a[-1].shape)) or real(k, *a))
    w = Tensor(np.ones((6, 2)), requires_grad=True)
    p = Tensor(np.ones(IDX.size), requires_grad=True)
    F.embedding_bag(IDX, w, OFFS, "sum", p).sum().backward()
    assert calls == [("embedding_bag_fwd", (4, 2)), ("embedding_bag_bwd", (6, 2)),
                     ("embedding_bag_psw_grad", (IDX.size,))]
    np.testing.assert_array_equal(p.grad, np.full(IDX.size, 2.0))  # each row's dot of ones
