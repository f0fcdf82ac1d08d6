"""cumsum (scan), embedding bag and cross-entropy against float64 numpy within the bounds
of tilepy.kernels.checks_lib; the JIT gives the interpreter's bits."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels.checks_lib import cumsum_case, embedding_bag_case, xent_case
from tilepy.kernels.embedding_bag import embedding_bag
from tilepy.kernels.scan import cumsum
from tilepy.kernels.xent import xent_bwd, xent_fwd


def _passes(case, out):
    err, ratio = case.error(out)
    assert case.passes(out), f"{case.name}: max error {err:.3g} is {ratio:.3g}x the bound"


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_is_the_sequential_scan(reverse):
    case = cumsum_case(np.random.default_rng(1), 9, 600, reverse)
    (x,) = case.inputs
    with tilepy.backend("interp"):
        y = cumsum(reverse, 4, 256)(x)
    _passes(case, y)
    seq = np.cumsum(x[:, ::-1] if reverse else x, axis=1, dtype=np.float32)  # sequential
    assert np.array_equal(y, seq[:, ::-1] if reverse else seq)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    case = embedding_bag_case(np.random.default_rng(2), 50, 40, 9, mode)
    with tilepy.backend("interp"):
        out = embedding_bag(mode, 32)(*case.inputs)
    _passes(case, out)
    assert not out[0].any()  # an empty bag gives 0


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_forward_backward(eps):
    case = xent_case(np.random.default_rng(3), 20, 300, eps, chunk=128)
    i = case.inputs
    with tilepy.backend("interp"):
        loss, lse = xent_fwd(-100, eps, 8, 128)(i["x"], i["labels"])
        dx = xent_bwd(-100, eps, 8, 128)(i["x"], i["labels"], lse, i["dloss"])
    for name, (err, ratio, ok) in case.check({"loss": loss, "lse": lse, "dx": dx}).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"
    assert not dx[::5].any() and not loss[::5].any()  # ignored rows


def test_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 300)).astype(np.float32)
    lab = rng.integers(0, 300, 9).astype(np.int32)
    lab[2] = -100
    bag = embedding_bag_case(rng, 30, 20, 6, "mean")
    outs = {}
    for be in ("interp", "jit"):
        with tilepy.backend(be):
            loss, lse = xent_fwd(-100, 0.1, 8, 128)(x, lab)
            outs[be] = [cumsum(False, 4, 256)(x), embedding_bag("mean", 32)(*bag.inputs),
                        loss, lse, xent_bwd(-100, 0.1, 8, 128)(x, lab, lse, lse)]
    for want, got in zip(outs["interp"], outs["jit"]):
        assert np.array_equal(want, got)
