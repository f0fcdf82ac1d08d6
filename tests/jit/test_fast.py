"""The opt-in fast mode: BLAS gemm tiles and fast-math flags, checked against the
interpreter with the derived error bound (gamma_K * sum|a||b| from the exact product for
both, so they differ by at most twice that), never bitwise."""

from __future__ import annotations

import numpy as np
import pytest

import tilepy.jit as jit
from tests.strategies import program
from tilepy.interpreter import run as interp_run
from tilepy.kernels import gemm


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


@pytest.mark.parametrize("dt,u,ta,tb", [("float32", 2.0**-24, False, False),
                                         ("float64", 2.0**-53, True, True)])
def test_fast_gemm_within_the_derived_bound(dt, u, ta, tb):
    func = gemm(32, 32, 16, dt, dt, dt, ta, tb).func
    k = jit.compile(func, fast=True)
    # one product: BLAS on panels over Numba's threads (a BLAS call each)
    assert "_gemm_par(" in k.source and "_gemm_par(" not in jit.compile(func, tier="py").source
    rng = np.random.default_rng(5)
    for M, N, K in [(45, 70, 37), (64, 64, 64)]:
        a = rng.standard_normal((K, M) if ta else (M, K)).astype(dt)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(dt)
        want, got = np.zeros((M, N), dt), np.zeros((M, N), dt)
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, {"A": a, "B": b, "C": want}, sizes)
        k({"A": a, "B": b, "C": got}, sizes)
        A = a.T.astype(np.float64) if ta else a.astype(np.float64)
        B = b.T.astype(np.float64) if tb else b.astype(np.float64)
        # products round once (u) and K adds: gamma_{K+1} each side of the exact value
        bound = 2 * gamma(K + 1, u) * (np.abs(A) @ np.abs(B))
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        assert np.all(err <= bound), float((err / np.maximum(bound, 1e-300)).max())
        assert np.isfinite(got).all()


def test_fast_mode_other_constructs_stay_exact_when_nothing_can_change():
    func = program(4)  # a copy chain: no arithmetic for fast math to change
    rng = np.random.default_rng(2)
    sizes = {"M": 19, "N": 23}
    arrs = {p.name: rng.standard_normal((19, 23)).astype(p.dtype.np_dtype)
            for p in func.params}
    a = {k: v.copy() for k, v in arrs.items()}
    b = {k: v.copy() for k, v in arrs.items()}
    interp_run(func, a, sizes)
    jit.run(func, b, sizes, fast=True)
    out = func.params[-1].name
    assert np.array_equal(a[out].view(np.uint8), b[out].view(np.uint8))


@pytest.mark.parametrize("dt", ["bfloat16", "float8_e4m3fn"])
def test_fast_gemm_takes_narrow_tiles_to_blas_within_the_bound(dt):
    """Narrow tiles are held as float32 on their grid, so their products are exact and
    BLAS's float32 sum of K of them stays within gamma_K * sum|a||b| of the exact value."""
    import ml_dtypes

    func = gemm(32, 32, 16, dt, "float32", "float32").func
    k = jit.compile(func, fast=True)
    # the launch is one product: operands decoded to float32 once, BLAS on panels
    assert "_gemm_par(" in k.source
    assert "one matrix product" in k.source and f"_dec_{dt}(" in k.source
    rng = np.random.default_rng(6)
    M, N, K = 45, 70, 37
    a = rng.standard_normal((M, K)).astype(getattr(ml_dtypes, dt))
    b = rng.standard_normal((K, N)).astype(getattr(ml_dtypes, dt))
    want, got = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    sizes = {"M": M, "N": N, "K": K}
    interp_run(func, {"A": a, "B": b, "C": want}, sizes)
    k({"A": a, "B": b, "C": got}, sizes)
    A, B = a.astype(np.float64), b.astype(np.float64)
    bound = 2 * gamma(K, 2.0**-24) * (np.abs(A) @ np.abs(B))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(err <= bound), float((err / np.maximum(bound, 1e-300)).max())
    assert not np.array_equal(got, np.zeros_like(got))



_FAST_FIRST = r"""
import json
import numpy as np
import tilepy.jit as jit
import tilepy.language as T
from tilepy.interpreter import run as interp_run

@T.prim_func
def row_max(X: T.Tensor((4, 16), "float32"), Y: T.Tensor((4,), "float32")):
    with T.Kernel(1) as _:
        x = T.alloc_fragment((4, 16), "float32")
        m = T.alloc_fragment((4,), "float32")
        T.copy(X[0, 0], x)
        T.reduce_max(x, m, dim=1)
        T.copy(m, Y[0])

x = np.zeros((4, 16), np.float32)
x[0, 0] = -0.0            # -0 first, then +0: the fold keeps -0
x[1, 1:] = -0.0           # +0 first, then -0: it keeps +0
x[2] = np.arange(16)
x[2, 5] = np.nan          # a NaN anywhere: NaN
x[3] = -np.arange(16) - 1.0
want, got, got_fast = (np.zeros(4, np.float32) for _ in range(3))
jit.run(row_max.func, {"X": x, "Y": got_fast}, {}, fast=True)  # first: its helpers too
jit.run(row_max.func, {"X": x, "Y": got}, {})
interp_run(row_max.func, {"X": x, "Y": want}, {})
print(json.dumps([want.view(np.uint32).tolist(), got.view(np.uint32).tolist()]))
"""


def test_exact_kernels_compiled_after_a_fast_one_stay_exact(tmp_path):
    """Numba compiles a callee with the flags of its first caller and reuses that code
    (numba#7168): runtime helpers first reached from a fast-math kernel gave exact kernels
    fast-math code (a max losing -0 and NaN). The helpers say fastmath=False, so the order
    of compiles does not matter. A fresh process without the disk cache, fast first."""
    import json
    import os
    import subprocess
    import sys
    script = tmp_path / "fast_first.py"  # kernels need a source file
    script.write_text(_FAST_FIRST)
    env = dict(os.environ, TILEPY_JIT_DISK_CACHE="0")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, check=True, cwd=tmp_path)
    want, got = json.loads(out.stdout.strip().splitlines()[-1])
    assert want[:2] == [0x80000000, 0] and np.isnan(np.uint32(want[2]).view(np.float32))
    assert want == got, [hex(v) for v in want + got]
