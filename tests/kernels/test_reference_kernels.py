"""Every reference kernel agrees with an independent numpy formulation within the bound
derived from its numerics (tilepy/kernels/checks.py), on ragged sizes, in the interpreter."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels import checks

RNG_SEED = 1234


def _cases():
    rng = np.random.default_rng(RNG_SEED)
    return [
        checks.gemm_case(rng, 70, 90, 50, "float32"),
        checks.gemm_case(rng, 64, 64, 64, "float16", trans_A=True, trans_B=True),
        checks.gemm_case(rng, 65, 33, 40, "bfloat16", trans_B=True, out_dtype="bfloat16"),
        checks.gemm_case(rng, 64, 70, 96, "float8_e4m3fn"),
        checks.dequant_case(rng, 40, 70, 128),
        checks.conv_case(rng, 1, 7, 9, 8, 16, stride=2, pad=1),
        checks.conv_case(rng, 2, 5, 6, 32, 16, stride=2, pad=1),  # block_K divides C
        checks.softmax_case(rng, 9, 700, block_N=256),
        checks.softmax_case(rng, 9, 200, block_N=256),
        checks.layernorm_case(rng, 10, 300),
        checks.rmsnorm_case(rng, 10, 300),
        *[checks.row_reduce_case(rng, 10, 300, k) for k in
          ("sum", "max", "min", "abssum", "absmax")],
        checks.vector_add_case(rng, 5000),
        checks.bias_gelu_case(rng, 40, 200),
        checks.attention_case(rng, 1, 2, 90, 16, False),
        checks.attention_case(rng, 2, 1, 90, 16, True),
    ]


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.name}-{c.dtype}" for c in CASES])
def test_kernel_within_derived_bound(case):
    with tilepy.backend("interp"):
        out = case.kernel(*case.inputs)
    assert out.shape == case.reference.shape
    err, ratio = case.error(out)
    assert case.passes(out), f"max error {err:.3g} is {ratio:.3g}x the derived bound"


def test_bounds_are_tight_enough_to_catch_a_wrong_answer():
    # A bound far looser than the kernel's real error would let wrong kernels pass: move
    # each output by 4 bounds (plus 8 float32 ulps, for the exact cases) and require every
    # case to notice.
    for case in CASES:
        with tilepy.backend("interp"):
            out = case.kernel(*case.inputs).astype(np.float64)
        wrong = out + 4 * case.bound + np.abs(out) * 2.0**-20 + 1e-30
        assert not case.passes(wrong), case.name


def test_exact_cases_are_exact():
    rng = np.random.default_rng(7)
    for kind in ("max", "min", "absmax"):
        case = checks.row_reduce_case(rng, 5, 77, kind)
        with tilepy.backend("interp"):
            out = case.kernel(*case.inputs)
        assert np.array_equal(out.astype(np.float64), case.reference)
    case = checks.vector_add_case(rng, 3000)
    with tilepy.backend("interp"):
        out = case.kernel(*case.inputs)
    x, y = case.inputs
    assert np.array_equal(out, x + y)  # numpy's float32 add is the same IEEE op
