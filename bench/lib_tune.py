"""Library bench, auto-tuner and profiler rows (issue #18): the library gemm tuned over tile
configs (exact and fast modes) against numpy's BLAS sgemm, the model-guided search's pick
against the grid search's best, and the profiler's cost per launch. Every output is checked
against the gemm's derived bound before anything is timed.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/lib_tune.py [--quick]

Tuning compiles every config on the JIT (in parallel worker processes); the tuning results
are cached in the tilepy cache dir, so a second run times the same picks without tuning.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilepy  # noqa: E402
from tilepy.kernels import checks  # noqa: E402
from tilepy.kernels.gemm import gemm  # noqa: E402

CONFIGS = {"block_M": [32, 64], "block_N": [32, 64], "block_K": [32]}
QUICK_CONFIGS = {"block_M": [32, 64], "block_N": [64], "block_K": [32]}


def best_of(fns: dict, rounds: int, burst: int = 3) -> dict:
    """Minimum seconds per competitor over rounds of alternating bursts of calls, after a
    warm-up; each burst's first call is dropped (a thread pool waking after another
    library's ran is not the kernel's time: docs/perf-log.md)."""
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            for i in range(burst):
                t = time.perf_counter()
                f()
                if i:
                    best[k] = min(best[k], time.perf_counter() - t)
    return best


def _check(what: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, fast: bool) -> str:
    """|got - A@B| within the fp32 gemm bound: gamma_{K+1} sum|a||b| (doubled in fast mode,
    any order of adds), plus the float64 reference's own error."""
    A, B = a.astype(np.float64), b.astype(np.float64)
    K = A.shape[1]
    s = np.abs(A) @ np.abs(B)
    bound = (2 if fast else 1) * checks.gamma(K + 1) * s + 2 * checks.gamma(K, 2.0**-53) * s
    err = np.abs(got.astype(np.float64) - A @ B)
    if not (err <= bound).all():
        raise AssertionError(f"{what}: max error {err.max():.3g} outside the derived bound")
    return f"ok, max err {err.max():.2g} <= bound {bound.max():.2g}"


def _tuned(configs, fast: bool, search="grid", budget=None):
    with tilepy.backend("jit", fast=fast):
        return tilepy.autotune(configs=configs, search=search, budget=budget, rep=5)(gemm)(
            in_dtype="float32")


def rows(quick: bool = False) -> list[dict]:
    n = 256 if quick else 512
    configs = QUICK_CONFIGS if quick else CONFIGS
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    out = np.empty((n, n), np.float32)
    rounds = 5 if quick else 15
    picks, kernels = {}, {}
    for fast in (False, True):
        t0 = time.perf_counter()
        with tilepy.backend("jit", fast=fast):
            res = _tuned(configs, fast).tune(a, b)
        picks[fast] = (res, time.perf_counter() - t0)
        kernels[fast] = res.kernel
    with tilepy.backend("jit"):
        exact_c = kernels[False](a, b)
        untuned = gemm(in_dtype="float32")(a, b)
    with tilepy.backend("jit", fast=True):
        fast_c = kernels[True](a, b)
    check = _check("tuned exact", exact_c, a, b, False) + "; " + _check(
        "tuned fast", fast_c, a, b, True)
    if not np.array_equal(exact_c.view(np.uint32), untuned.view(np.uint32)):
        raise AssertionError("tuned exact gemm differs from the untuned one in some bits")
    check += "; exact bits = untuned bits"

    def run(fast):
        with tilepy.backend("jit", fast=fast):
            kernels[fast](a, b)

    t = best_of({"exact": lambda: run(False), "fast": lambda: run(True),
                 "numpy": lambda: np.matmul(a, b, out=out)}, rounds)
    note = (f"picked exact {picks[False][0].config} (tuned in {picks[False][1]:.1f} s"
            f"{', cached' if picks[False][0].cached else ''}), fast {picks[True][0].config}")
    result = [{"kernel": f"gemm fp32 {n}^3, tuned over {len(picks[False][0].tried) or 'cached'}"
               " configs", "check": check, "fast": t["fast"], "exact": t["exact"],
               "peer": t["numpy"], "peer_name": "numpy BLAS sgemm",
               "goal": ">= 0.7x peer (exact)", "note": note}]
    result.append(_model_row(a, b, configs, rounds))
    result.append(_profiler_row(kernels[False], a, b, rounds, check))
    return result


def _model_row(a, b, configs, rounds) -> dict:
    """The model search's single measured pick against the grid search's best config."""
    with tilepy.backend("jit"):
        grid = _tuned(configs, False).tune(a, b)
        model = _tuned(configs, False, "model", 1).tune(a, b)
        got = model.kernel(a, b)
    check = _check("model pick", got, a, b, False)

    def run(k):
        with tilepy.backend("jit"):
            k(a, b)

    t = best_of({"model": lambda: run(model.kernel), "grid": lambda: run(grid.kernel)},
                rounds)
    return {"kernel": f"gemm fp32 {a.shape[0]}^3, model search (1 config measured)",
            "check": check, "fast": None, "exact": t["model"], "peer": t["grid"],
            "peer_name": "grid search's best", "goal": ">= 0.9x peer",
            "note": f"model picked {model.config}, grid {grid.config}" + (
                " (the same kernel: the ratio is the timing noise)"
                if model.config == grid.config else "")}


def _profiler_row(kernel, a, b, rounds, check) -> dict:
    """A launch recorded by an open `tilepy.profile()` session against the same launch
    with no session (the hook switched per call, so the session's set-up is not timed)."""
    import importlib

    hook = importlib.import_module("tilepy.backend")

    def plain():
        with tilepy.backend("jit"):
            kernel(a, b)

    with tilepy.profile() as session:
        def profiled():
            hook.PROFILER = session
            plain()
            hook.PROFILER = None

        hook.PROFILER = None
        t = best_of({"profiled": profiled, "plain": plain}, rounds)
        hook.PROFILER = session
    return {"kernel": f"tilepy.profile() around a gemm {a.shape[0]}^3 launch",
            "check": check.split(";")[0], "fast": None, "exact": t["profiled"],
            "peer": t["plain"], "peer_name": "the same launch, no profiler",
            "goal": ">= 0.98x peer (overhead <= 2%)"}


def _fmt(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f} ms"


def main() -> None:
    quick = "--quick" in sys.argv
    print("| kernel | check | fast | exact | peer | peer/fast | peer/exact | goal | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows(quick):
        ratio = lambda x, r=r: "-" if x is None else f"{r['peer'] / x:.2f}x"  # noqa: E731
        print(f"| {r['kernel']} | {r['check']} | {_fmt(r['fast'])} | {_fmt(r['exact'])} | "
              f"{_fmt(r['peer'])} ({r['peer_name']}) | {ratio(r['fast'])} | "
              f"{ratio(r['exact'])} | {r['goal']} | {r.get('note', '')} |")


if __name__ == "__main__":
    main()
