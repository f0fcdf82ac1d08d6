"""CSR SpMM (merge-path partition) and SDDMM on power-law matrices (empty rows, a full
row) against float64 numpy within the bounds of tilepy.kernels.checks_lib; partitions from
one block to one per few items give results within the bound; the JIT gives the
interpreter's bits."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import KernelInputError
from tilepy.kernels.checks_lib import sddmm_case, spmm_case
from tilepy.kernels.sparse_api import sddmm, spmm


def _csr(case, shape):
    indptr, indices, data = case.inputs[:3]
    return (indptr, indices, data, shape)


@pytest.mark.parametrize("items", [3, 17, 64, 10**6])
def test_spmm_power_law_within_bound(items):
    case = spmm_case(np.random.default_rng(items), 120, 90, 70)
    assert np.diff(case.inputs[0]).min() == 0 and np.diff(case.inputs[0]).max() == 90
    with tilepy.backend("interp"):
        out = spmm(_csr(case, (120, 90)), case.inputs[3], items_per_block=items, block_N=32)
    err, ratio = case.error(out)
    assert case.passes(out), f"max error {err:.3g} is {ratio:.3g}x the bound"


def test_spmm_partition_changes_only_the_order():
    # one piece per row or one piece in all: the same sums up to rounding, and the result
    # does not depend on anything but the partition (same partition, same bits)
    case = spmm_case(np.random.default_rng(9), 60, 50, 8)
    a, b = _csr(case, (60, 50)), case.inputs[3]
    with tilepy.backend("interp"):
        one, many, again = (spmm(a, b, items_per_block=n, block_N=8) for n in (10**6, 5, 5))
    assert np.array_equal(many, again)
    assert np.allclose(one, many, rtol=1e-5, atol=1e-5)


def test_sddmm_power_law_within_bound():
    case = sddmm_case(np.random.default_rng(2), 100, 80, 12)
    with tilepy.backend("interp"):
        out = sddmm(_csr(case, (100, 80)), *case.inputs[3:], block_K=16)
    err, ratio = case.error(out)
    assert case.passes(out), f"max error {err:.3g} is {ratio:.3g}x the bound"


def test_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(11)
    case, sd = spmm_case(rng, 90, 60, 40), sddmm_case(rng, 90, 60, 12)
    outs = {}
    for be in ("interp", "jit"):
        with tilepy.backend(be):
            outs[be] = (spmm(_csr(case, (90, 60)), case.inputs[3], items_per_block=16),
                        sddmm(_csr(sd, (90, 60)), *sd.inputs[3:], block_K=16))
    for want, got in zip(outs["interp"], outs["jit"]):
        assert np.array_equal(want, got)


def test_bad_csr_is_reported():
    indptr = np.array([0, 2, 1], np.int32)
    with pytest.raises(KernelInputError, match="indptr"):
        spmm((indptr, np.zeros(1, np.int32), np.zeros(1, np.float32), (2, 3)),
             np.zeros((3, 4), np.float32))
    ok = (np.array([0, 1], np.int32), np.array([5], np.int32), np.ones(1, np.float32), (1, 3))
    with pytest.raises(KernelInputError, match=r"column indices must lie in \[0, 3\)"):
        spmm(ok, np.zeros((3, 4), np.float32))
