"""The library gemm's lowering forms side by side in one process (docs/perf-log.md): exact
fp32 with A's in-range tiles read in place (jit/direct.py) against the copying form, and
fast bf16 as decode + one BLAS call against the per-tile form; numpy fp32 as the anchor.
Each pair is compiled from the same IR with the other form forced, checked (exact: the
same bits; fast: within gamma_K sum|a||b|), then timed as bench/lib_core.py does (the
minimum over alternating rounds of bursts of two). Prints GFLOP/s. Usage:
    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python bench/gemm_forms.py [n] [rounds]
(one thread: CPU seconds; otherwise wall seconds).
"""

import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin (PERF_NOTES)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from lib_core import _best  # noqa: E402

import tilepy.jit as jit  # noqa: E402
from tilepy.jit import direct, fast  # noqa: E402
from tilepy.kernels import gemm  # noqa: E402


def _pair(func, is_fast: bool, patch) -> dict:
    """{'new': kernel, 'old': kernel with `patch()` applied while compiling}."""
    out = {}
    for name in ("new", "old"):
        undo = patch() if name == "old" else (lambda: None)
        jit.clear_memory_cache()
        out[name] = jit.compile(func, fast=is_fast)
        undo()
    jit.clear_memory_cache()
    return out


def _no_direct():
    plan = direct.plan
    direct.plan = lambda em, body: {}
    return lambda: setattr(direct, "plan", plan)


def _per_tile():
    ok = fast._globals_ok
    fast._globals_ok = lambda em, *ops, narrow=False: ok(em, *ops)  # no decoded operands
    return lambda: setattr(fast, "_globals_ok", ok)


def run(n: int, rounds: int, dt: str, is_fast: bool, patch) -> str:
    import ml_dtypes

    ks = _pair(gemm(64, 64, 32, dt, "float32").func, is_fast, patch)
    rng = np.random.default_rng(0)
    np_dt = np.float32 if dt == "float32" else getattr(ml_dtypes, dt)
    a, b = (rng.standard_normal((n, n)).astype(np_dt) for _ in range(2))
    af, bf = a.astype(np.float32), b.astype(np.float32)
    sizes, outs = {"M": n, "N": n, "K": n}, {}
    for name, k in ks.items():
        outs[name] = np.full((n, n), np.nan, np.float32)
        k({"A": a, "B": b, "C": outs[name]}, sizes)
    if is_fast:
        bound = 2 * n * 2.0**-24 * (np.abs(af).astype(np.float64) @ np.abs(bf))
        ref = af.astype(np.float64) @ bf
        assert all(np.all(np.abs(o - ref) <= bound) for o in outs.values()), "bound"
    else:
        assert np.array_equal(outs["new"].view(np.uint32), outs["old"].view(np.uint32))
    c = np.empty((n, n), np.float32)
    fns = {name: (lambda k=k: k({"A": a, "B": b, "C": c}, sizes)) for name, k in ks.items()}
    fns["numpy"] = lambda: af @ bf
    one = os.environ.get("NUMBA_NUM_THREADS") == "1"
    t = _best(fns, rounds, clock=time.process_time if one else time.perf_counter)
    gf = {k: 2 * n**3 / v / 1e9 for k, v in t.items()}
    return (f"{'fast' if is_fast else 'exact'} {dt} {n}: new {gf['new']:.0f}, old "
            f"{gf['old']:.0f}, numpy {gf['numpy']:.0f} GFLOP/s (new/old "
            f"{t['old'] / t['new']:.2f}x, new/numpy {t['numpy'] / t['new']:.2f}x)")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(run(n, rounds, "float32", False, _no_direct), "[old: tiles copied]")
    print(run(n, rounds, "bfloat16", True, _per_tile), "[old: per-tile BLAS]")
