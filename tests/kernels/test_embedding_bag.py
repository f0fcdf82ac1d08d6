"""Embedding bag in the library (tilepy.kernels.embedding_bag_api): forward, the sparse
table gradient and the per-sample weights' gradient against float64 loops within the
bounds of tilepy.kernels.checks_lib, in the interpreter (the JIT check of the forward is
tests/kernels/test_rowops.py's)."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import KernelInputError
from tilepy.kernels.checks_lib import embedding_bag_train_case
from tilepy.kernels.embedding_bag_api import (
    embedding_bag_backward,
    embedding_bag_forward,
    embedding_bag_weights_grad,
)

CASES = [("sum", False, "float32"), ("sum", True, "float32"), ("mean", False, "float32"),
         ("max", False, "float32"), ("sum", True, "bfloat16"), ("max", False, "float64")]


def _run(case, mode):
    i = case.inputs
    out, arg = embedding_bag_forward(i["weight"], i["indices"], i["offsets"], mode, i["psw"])
    rows, grads = embedding_bag_backward(i["dout"], i["indices"], i["offsets"], mode, arg,
                                         i["psw"])
    dw = np.zeros(i["weight"].shape, np.float64)
    dw[rows] = grads.astype(np.float64)
    res = {"out": out, "dw": dw, "rows": rows}
    if i["psw"] is not None:
        res["dpsw"] = embedding_bag_weights_grad(i["weight"], i["indices"], i["offsets"],
                                                 i["dout"])
    return res


@pytest.mark.parametrize("mode, weighted, dtype", CASES)
def test_forward_and_gradients_within_bound(mode, weighted, dtype):
    case = embedding_bag_train_case(np.random.default_rng(4), 40, 70, 12, mode, weighted,
                                    dtype)
    with tilepy.backend("interp"):
        got = _run(case, mode)
    assert got["out"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got["rows"], np.unique(case.inputs["indices"]))
    for name, (err, ratio, ok) in case.check(got).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


def test_max_takes_the_first_maximum_and_propagates_nan():
    w = np.array([[1, 2], [1, np.nan], [0, 5]], np.float32)
    idx = np.array([2, 0, 1, 1], np.int32)  # one bag: rows 2, 0, 1, 1
    off = np.array([0, 4], np.int32)
    with tilepy.backend("interp"):
        out, arg = embedding_bag_forward(w, idx, off, "max")
        rows, grads = embedding_bag_backward(np.ones((1, 2), np.float32), idx, off, "max",
                                             arg)
    assert out[0, 0] == 1 and np.isnan(out[0, 1])
    np.testing.assert_array_equal(arg, [[1, 2]])  # the first 1 (row 0), the first NaN
    np.testing.assert_array_equal(rows, [0, 1, 2])
    np.testing.assert_array_equal(grads, [[1, 0], [0, 1], [0, 0]])


def test_bad_inputs_name_the_callers_line():
    w = np.zeros((4, 3), np.float32)
    idx = np.array([0, 4], np.int32)
    with pytest.raises(KernelInputError, match=r"indices must lie in \[0, 4\); got 0 to 4") \
            as e:
        embedding_bag_forward(w, idx, [0, 2])
    assert e.value.loc.file == __file__
    with pytest.raises(KernelInputError, match="offsets must rise from 0 to 2"):
        embedding_bag_forward(w, np.zeros(2, np.int32), [0, 1])
    with pytest.raises(KernelInputError, match="per_sample_weights need mode 'sum'"):
        embedding_bag_forward(w, idx * 0, [0, 2], "mean", np.ones(2, np.float32))
    with pytest.raises(KernelInputError, match="max mode needs the forward's arg"):
        embedding_bag_backward(np.zeros((1, 3), np.float32), idx * 0, [0, 2], "max")
