"""Cross-entropy with torch's reductions (tilepy.kernels.xent_api): loss and dx for
'mean' | 'sum' | 'none', ignore_index and class weights, against float64 numpy within the
bounds of tilepy.kernels.checks_lib (interpreter; the per-row kernels' JIT check is
tests/kernels/test_rowops.py's)."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import KernelInputError
from tilepy.kernels.checks_lib import xent_reduced_case
from tilepy.kernels.xent_api import cross_entropy, cross_entropy_backward

CASES = [("mean", 0.0, False), ("sum", 0.0, False), ("none", 0.0, False),
         ("mean", 0.1, False), ("mean", 0.0, True), ("none", 0.0, True), ("sum", 0.0, True)]


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
    (dict(weight=np.ones(3, np.float32), label_smoothing=0.1), r"need label_smoothing=0"),
])
def test_bad_inputs_name_the_callers_line(kwargs, message):
    args = dict(x=np.zeros((2, 3), np.float32), labels=np.array([0, 1], np.int32))
    args.update(kwargs)
    with pytest.raises(KernelInputError, match=message) as e:
        cross_entropy(**args)
    assert e.value.loc.file == __file__
