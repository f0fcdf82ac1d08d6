"""Cross-entropy with torch's reductions (tilepy.kernels.xent_api): loss and dx for
'mean' | 'sum' | 'none', ignore_index, label smoothing and class weights (together too),
against float64 numpy within the bounds of tilepy.kernels.checks_lib (interpreter; the
unweighted per-row kernels' JIT check is tests/kernels/test_rowops.py's), and against
torch when it is installed."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import KernelInputError
from tilepy.kernels.checks_lib import xent_reduced_case
from tilepy.kernels.xent_api import cross_entropy, cross_entropy_backward

CASES = [("mean", 0.0, False), ("sum", 0.0, False), ("none", 0.0, False),
         ("mean", 0.1, False), ("mean", 0.0, True), ("none", 0.0, True), ("sum", 0.0, True),
         ("mean", 0.1, True), ("none", 0.1, True), ("sum", 0.25, True)]


def _run(case, reduction, smoothing):
    i = case.inputs
    kw = dict(reduction=reduction, label_smoothing=smoothing, weight=i["weight"])
    loss, lse = cross_entropy(i["x"], i["labels"], **kw)
    dx = cross_entropy_backward(i["x"], i["labels"], lse, i["dloss"], **kw)
    return {"loss": loss, "dx": dx}


@pytest.mark.parametrize("reduction, smoothing, weighted", CASES)
def test_loss_and_gradient_within_bound(reduction, smoothing, weighted):
    case = xent_reduced_case(np.random.default_rng(12), 37, 300, reduction, smoothing,
                             weighted)
    with tilepy.backend("interp"):
        got = _run(case, reduction, smoothing)
    assert got["loss"].dtype == np.float32
    assert got["loss"].shape == (() if reduction != "none" else (37,))
    for name, (err, ratio, ok) in case.check(got).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


def test_mean_is_over_the_rows_not_ignored():
    # 4 rows, 2 ignored: the mean is the kept rows' sum / 2 (a mean over all 4 rows, or
    # over the weights of ignored rows, would halve it)
    x = np.zeros((4, 3), np.float32)
    lab = np.array([0, -100, 2, -100], np.int32)
    with tilepy.backend("interp"):
        loss, lse = cross_entropy(x, lab)
        total, _ = cross_entropy(x, lab, "sum")
        dx = cross_entropy_backward(x, lab, lse)
        wl, _ = cross_entropy(x, lab, weight=np.array([3, 1, 1], np.float32))
        nothing, _ = cross_entropy(x, np.full(4, -100, np.int32))
    assert loss == np.float32(np.log(3)) and total == np.float32(2 * np.log(3))
    np.testing.assert_allclose(dx[0], (np.full(3, 1 / 3) - [1, 0, 0]) / 2, rtol=1e-6)
    assert not dx[1].any() and not dx[3].any()
    assert wl == np.float32(np.log(3))  # (3 log 3 + log 3) / (3 + 1)
    assert np.isnan(nothing)  # every row ignored: 0 / 0, as torch


@pytest.mark.parametrize("kwargs, message", [
    (dict(reduction="avg"), r"reduction must be one of \('mean', 'sum', 'none'\)"),
    (dict(labels=np.array([0, 5], np.int32)), r"labels must lie in \[0, 3\) or be "
                                              r"ignore_index=-100; got 5"),
    (dict(weight=np.ones(2, np.float32)), r"class weights must have shape \(3,\)"),
])
def test_bad_inputs_name_the_callers_line(kwargs, message):
    args = dict(x=np.zeros((2, 3), np.float32), labels=np.array([0, 1], np.int32))
    args.update(kwargs)
    with pytest.raises(KernelInputError, match=message) as e:
        cross_entropy(**args)
    assert e.value.loc.file == __file__


def test_weights_with_smoothing_weight_the_smoothing_term():
    # torch's definition weights the smoothing term per class; weighting only the row (the
    # unweighted smoothed loss times w[y]) must fail the bound
    from tilepy.kernels.xent import xent_fwd

    case = xent_reduced_case(np.random.default_rng(14), 37, 300, "none", 0.3, True)
    i = case.inputs
    with tilepy.backend("interp"):
        rows, _ = xent_fwd(-100, 0.3)(i["x"], i["labels"])
    keep = i["labels"] != -100
    wrong = rows * np.where(keep, i["weight"][np.where(keep, i["labels"], 0)], 0)
    assert not case.check({"loss": wrong, "dx": case.refs["dx"]})["loss"][2]


TORCH_CASES = [(r, eps) for r in ("mean", "sum", "none") for eps in (0.0, 0.2)]


@pytest.mark.parametrize("reduction, smoothing", TORCH_CASES)
def test_matches_torch_with_weights_smoothing_and_ignored_rows(reduction, smoothing):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((23, 70)) * 3).astype(np.float32)
    lab = rng.integers(0, 70, 23).astype(np.int32)
    lab[::4] = 7  # ignore_index=7 is a class too: those rows are ignored
    w = rng.uniform(0.2, 3, 70).astype(np.float32)
    dloss = rng.standard_normal(23 if reduction == "none" else ()).astype(np.float32)
    kw = dict(reduction=reduction, ignore_index=7, label_smoothing=smoothing)
    with tilepy.backend("interp"):
        loss, lse = cross_entropy(x, lab, weight=w, **kw)
        dx = cross_entropy_backward(x, lab, lse, dloss, weight=w, **kw)
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    t = torch.nn.functional.cross_entropy(X, torch.tensor(lab, dtype=torch.int64),
                                          weight=torch.tensor(w, dtype=torch.float64), **kw)
    t.backward(torch.tensor(dloss, dtype=torch.float64))
    np.testing.assert_allclose(loss, t.detach().numpy(), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(dx, X.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert not dx[::4].any()


@pytest.mark.parametrize("backward", [
    False, pytest.param(True, marks=pytest.mark.exhaustive)])  # one compile by default
def test_weighted_kernels_jit_gives_the_interpreters_bits(backward):
    from tilepy.kernels.xent import xent_bwd_weighted, xent_fwd_weighted
    from tilepy.kernels.xent_api import _class_weights

    rng = np.random.default_rng(16)
    x = rng.standard_normal((9, 300)).astype(np.float32)
    lab = rng.integers(0, 300, 9).astype(np.int32)
    lab[2] = -100
    w, ws = _class_weights(rng.uniform(0.5, 2, 300))
    outs = {}
    for be in ("interp", "jit"):
        with tilepy.backend(be):
            outs[be] = list(xent_fwd_weighted(-100, 0.1, 8, 128)(x, lab, w, ws))
            if backward:
                outs[be].append(xent_bwd_weighted(-100, 0.1, 8, 128)(
                    x, lab, outs[be][1], outs[be][0], w, ws))
    for want, got in zip(outs["interp"], outs["jit"]):
        assert np.array_equal(want, got)
