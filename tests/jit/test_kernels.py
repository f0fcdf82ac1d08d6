"""The reference kernels (tilepy.kernels, the demo's cases) run in the interpreter and in
the JIT and agree bit for bit. CI compiles a representative subset; `thorough` runs every
case in both JIT tiers."""

from __future__ import annotations

import os

import pytest

import tilepy
from tests.jit.oracle import assert_same_bits
from tilepy.kernels.checks import demo_cases

THOROUGH = os.environ.get("TILEPY_HYPOTHESIS_PROFILE") == "thorough"
CASES = demo_cases(0)
# gemm fp32 (edge tiles), gemm fp8, dequant fp4, conv (re-viewed weights), softmax,
# layernorm, causal flash attention
CI = [0, 3, 4, 5, 6, 7, 14]
PICK = range(len(CASES)) if THOROUGH else CI


def _outputs(r):
    return list(r) if isinstance(r, (list, tuple)) else [r]


def _agree(i: int, backend: str) -> None:
    case = CASES[i]
    with tilepy.backend("interp"):
        want = _outputs(case.kernel(*case.inputs))
    with tilepy.backend(backend):
        got = _outputs(case.kernel(*case.inputs))
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert_same_bits(w, g, f"{case.name} {case.dtype} {case.shape}")
    assert case.passes(got[0])  # and the derived error bound holds


@pytest.mark.parametrize("i", PICK, ids=lambda i: CASES[i].name.replace(" ", "_"))
def test_reference_kernel_numba(i):
    _agree(i, "jit")


@pytest.mark.parametrize("i", range(len(CASES)) if THOROUGH else [0, 4, 6],
                         ids=lambda i: CASES[i].name.replace(" ", "_"))
def test_reference_kernel_py_tier(i):
    _agree(i, "py")
