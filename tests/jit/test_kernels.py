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
# gemm fp32 (edge tiles), gemm fp8, dequant fp4, softmax. The conv, layernorm and causal
# flash attention cases compile on the JIT in tests of their own (the conv kernel's channel
# tiles and direct form, layernorm's two paths, the attention forward and backward), so
# only `thorough` runs them here too.
CI = [0, 3, 4, 6]
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


def test_softmax_one_pass_and_online_paths_numba():
    """Rows that fit one tile take the one-pass path, longer rows the online one."""
    import numpy as np

    from tilepy.kernels.checks import softmax_case

    rng = np.random.default_rng(9)
    for case in (softmax_case(rng, 5, 200, block_N=256), softmax_case(rng, 5, 300, 256)):
        with tilepy.backend("interp"):
            want = case.kernel(*case.inputs)
        with tilepy.backend("jit"):
            got = case.kernel(*case.inputs)
        assert_same_bits(want, got, case.name)
        assert case.passes(got)


def test_conv_with_and_without_channel_multiples_of_block_k_numba():
    """C a multiple of block_K (k steps inside one (kh, kw)) or not, padding or not."""
    import numpy as np

    from tilepy.kernels.checks import conv_case

    rng = np.random.default_rng(10)
    for case in (conv_case(rng, 2, 5, 6, 32, 16, stride=2, pad=1),
                 conv_case(rng, 1, 4, 5, 64, 8, stride=1, pad=0),
                 conv_case(rng, 1, 5, 5, 12, 8)):
        with tilepy.backend("interp"):
            want = case.kernel(*case.inputs)
        with tilepy.backend("jit"):
            got = case.kernel(*case.inputs)
        assert_same_bits(want, got, case.shape)
        assert case.passes(got)


GEMMS = [  # (block_M, block_N, block_K, in, out, accum, trans_A, trans_B): register blocks
    (32, 48, 16, "float32", "float32", "float32", True, True),  # + 4x16 remainder strips
    (64, 64, 32, "bfloat16", "float32", "float32", False, False),
    (20, 24, 8, "float64", "float64", "float64", False, True),  # 4x8 blocks + remainders
]


@pytest.mark.parametrize("cfg", GEMMS, ids=lambda c: f"{c[3]}_{c[0]}x{c[1]}x{c[2]}")
def test_gemm_register_blocked_micro_kernel(cfg):
    import numpy as np

    from tilepy.interpreter import run as interp_run
    from tilepy.jit import compile as jit_compile
    from tilepy.kernels import gemm

    func = gemm(*cfg).func
    k = jit_compile(func)
    assert "register blocks" in k.source
    rng = np.random.default_rng(3)
    ta, tb = cfg[6], cfg[7]
    for M, N, K in [(70, 50, 33), (cfg[0], cfg[1], cfg[2]), (1, 97, 5)]:
        a = rng.standard_normal((K, M) if ta else (M, K)).astype(func.params[0].dtype.np_dtype)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(func.params[1].dtype.np_dtype)
        want = np.zeros((M, N), func.params[2].dtype.np_dtype)
        got = want.copy()
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, {"A": a, "B": b, "C": want}, sizes)
        k({"A": a, "B": b, "C": got}, sizes)
        assert_same_bits(want, got, f"gemm {cfg} {M}x{N}x{K}")


@pytest.mark.exhaustive  # a large compile; the default set compiles the kernel elsewhere
def test_attention_with_every_key_visible_numba():
    """Non-causal, the sequence a multiple of block_N: no mask loop, the scores gemm clears
    its accumulator and the P.V gemm reads the float32 scores as they are; the same bits
    as the interpreter (exact) and within the derived bound (fast)."""
    import numpy as np

    from tilepy.jit import compile as jit_compile
    from tilepy.kernels.checks import attention_case

    case = attention_case(np.random.default_rng(11), 1, 2, 128, 32, False)
    src = jit_compile(case.kernel.func, tier="py").source
    assert "-np.inf)" not in src.split("for k in")[1]  # no mask inside the k loop
    _exact_and_fast(case, case.name)


@pytest.mark.exhaustive  # a large compile; the default set compiles the kernel elsewhere
def test_layernorm_one_pass_and_chunked_paths_numba():
    """Rows that fit one tile are read once (one-pass path), longer rows in chunks; both
    agree with the interpreter bit for bit, and fast mode stays within the bound."""
    import numpy as np

    from tilepy.kernels import layernorm
    from tilepy.kernels.checks import layernorm_case

    rng = np.random.default_rng(12)
    for n in (200, 300):  # one tile of 256 columns, then two chunks
        case = layernorm_case(rng, 9, n)
        case.kernel = layernorm(4, 256)
        _exact_and_fast(case, f"layernorm 9x{n}")


def _exact_and_fast(case, what: str) -> None:
    """The case on the JIT equals the interpreter bit for bit; exact and fast results
    both pass the case's derived bound."""
    with tilepy.backend("interp"):
        want = case.kernel(*case.inputs)
    with tilepy.backend("jit"):
        got = case.kernel(*case.inputs)
    with tilepy.backend("jit", fast=True):
        fast = case.kernel(*case.inputs)
    assert_same_bits(want, got, what)
    assert case.passes(got) and case.passes(fast)
