"""Issue #18 rows for existing code paths: `tilepy.precision.cast` (the Numba encoders behind
it) against ml_dtypes' astype; the library gemm's compile, cold and from the disk cache,
each in a fresh process, against the issue's goals; the library gemm (fp32, bf16, fp8
inputs) and softmax in exact and fast mode against numpy.

Follows bench18's protocol: `rows(quick)` checks every output before timing it, then takes
the minimum over alternating rounds. The cast rows run tilepy at 1 and 2 threads (ml_dtypes
is single-threaded; the row's time is the 1-thread one, the note gives 2). Compile rows time
fresh processes (the seconds of the compile call; the note gives its CPU seconds, which a
busy machine inflates less). Usage:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lib_core.py [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin (PERF_NOTES)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tilepy.precision import cast, get_format  # noqa: E402

CAST_FORMATS = ("float8_e4m3fn", "bfloat16", "float4_e2m1fn")


def _best(fns: dict, rounds: int) -> dict:
    """Minimum seconds per callable over `rounds` alternating rounds, after a warm-up."""
    for f in fns.values():
        f()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def cast_row(fmt: str, n: int, rounds: int) -> dict:
    import numba  # with Numba running, large casts take the Numba path (rounding.py)

    from tilepy.precision import rounding

    if not rounding._use_numba(n):
        raise AssertionError(f"cast of {n} float32 elements would not use the Numba codecs")
    f = get_format(fmt)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    x[: 1 << 12] = rng.integers(0, 2**32, 1 << 12, dtype=np.uint64).astype(
        np.uint32).view(np.float32)  # NaN payloads, infinities, subnormals
    with np.errstate(all="ignore"):
        want = x.astype(f.np_dtype)
    got = cast(x, fmt)
    bad = np.count_nonzero(got.view(f.storage) != want.view(f.storage))
    if bad:
        raise AssertionError(f"cast to {fmt}: {bad} codes differ from ml_dtypes")
    threads = numba.get_num_threads()

    def ml():
        with np.errstate(all="ignore"):
            x.astype(f.np_dtype)

    numba.set_num_threads(1)
    one = _best({"tilepy": lambda: cast(x, fmt), "ml": ml}, rounds)
    numba.set_num_threads(threads)
    two = _best({"tilepy": lambda: cast(x, fmt)}, rounds)["tilepy"]
    return {"kernel": f"cast float32 -> {fmt}, {n} elements", "check":
            f"ok, max err 0 <= bound 0 (all {n} codes equal ml_dtypes')",
            "fast": None, "exact": one["tilepy"], "peer": one["ml"],
            "peer_name": "ml_dtypes astype (1 thread)", "goal": ">= 1x peer (issue: 7-26x)",
            "note": f"1 thread; {threads} threads {two * 1e3:.2f} ms "
                    f"({one['ml'] / two:.1f}x)"}


_COMPILE = """
import sys, time
sys.path.insert(0, {root!r})
from tilepy.kernels import gemm
import tilepy.jit as jit
f = gemm(64, 64, 32, "float32", "float32").func
w, c = time.perf_counter(), time.process_time()
k = jit.compile(f)
w, c = time.perf_counter() - w, time.process_time() - c
import numpy as np
a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 7
out = np.zeros((64, 64), np.float32)
k({{"A": a, "B": a.T.copy(), "C": out}}, {{"M": 64, "N": 64, "K": 48}})
ref = a.astype(np.float64) @ a.T.astype(np.float64)
err = float(np.max(np.abs(out - ref)))
bound = 48 * 2.0**-24 * 1.0001 * float(np.max(np.abs(a.astype(np.float64)) @ np.abs(a.T)))
print(w, c, sum(k.fn.stats.cache_hits.values()), err, bound)
"""


def _compile_once(env: dict) -> tuple[float, float, int, float, float]:
    out = subprocess.run([sys.executable, "-c", _COMPILE.format(root=ROOT)], env=env,
                         capture_output=True, text=True, check=True)
    w, c, hits, err, bound = out.stdout.split()
    if float(err) > float(bound):
        raise AssertionError(f"gemm from a fresh process: error {err} > bound {bound}")
    return float(w), float(c), int(hits), float(err), float(bound)


def compile_rows(rounds: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEPY_CACHE_DIR=d, TILEPY_QUIET="1")
        cold = _compile_once(env)
        warm = [_compile_once(env) for _ in range(rounds)]
    if cold[2] != 0 or any(r[2] != 1 for r in warm):
        raise AssertionError(f"cache hits: cold {cold[2]}, warm {[r[2] for r in warm]}")
    best = min(warm)
    check = f"ok, max err {best[3]:.2g} <= bound {best[4]:.2g}"
    return [
        {"kernel": "library gemm fp32 compile, cold (fresh process)", "check": check,
         "fast": None, "exact": cold[0], "peer": 5.0, "peer_name": "issue goal 5 s",
         "goal": ">= 1x peer", "note": f"CPU {cold[1]:.2f} s"},
        {"kernel": "library gemm fp32 compile, disk cache, incl. Numba's start",
         "check": check, "fast": None, "exact": best[0], "peer": 0.3,
         "peer_name": "issue goal 0.3 s", "goal": ">= 1x peer",
         "note": f"CPU {min(r[1] for r in warm):.3f} s (min of {rounds} processes)"},
    ]


def _kernel_row(case, peer, peer_name: str, goal: str, rounds: int, what: str) -> dict:
    """Exact and fast mode of a tilepy.kernels.checks case, each output checked against
    the case's float64 reference and derived bound, then timed beside `peer`."""
    import tilepy

    def run(fast: bool):
        with tilepy.backend("jit", fast=fast):
            return case.kernel(*case.inputs)

    worst = 0.0
    for fast in (False, True):
        got = np.asarray(run(fast), dtype=np.float64)
        if not case.passes(got):
            raise AssertionError(f"{what} ({'fast' if fast else 'exact'}) exceeds its bound")
        worst = max(worst, float(np.max(np.abs(got - case.reference) / case.bound)))
    best = _best({"exact": lambda: run(False), "fast": lambda: run(True), "peer": peer},
                 rounds)
    return {"kernel": what, "check": f"ok, max err/bound {worst:.2g} <= 1",
            "fast": best["fast"], "exact": best["exact"], "peer": best["peer"],
            "peer_name": peer_name, "goal": goal,
            "note": f"peer/exact {best['peer'] / best['exact']:.2f}x, peer/fast "
                    f"{best['peer'] / best['fast']:.2f}x"}


def kernel_rows(quick: bool, rounds: int) -> list[dict]:
    from tilepy.kernels import checks, softmax

    rng = np.random.default_rng(0)
    n = 256 if quick else 1024
    out = []
    for dt, goal in (("float32", "exact >= 0.7x, fast >= 0.9x peer"),
                     ("bfloat16", "fast >= 0.9x peer"),
                     ("float8_e4m3fn", "fast >= 0.9x peer")):
        case = checks.gemm_case(rng, n, n, n, dt)
        a32, b32 = (x.astype(np.float32) for x in case.inputs)
        out.append(_kernel_row(case, lambda a=a32, b=b32: a @ b, "numpy fp32 matmul (BLAS)",
                               goal, rounds, f"gemm {dt} {n}^3, fp32 acc"))
    case = checks.softmax_case(rng, n, n, block_N=n)
    case.kernel = softmax(block_N=n)
    x = case.inputs[0]

    def np_softmax():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    out.append(_kernel_row(case, np_softmax, "numpy unfused", "exact >= 2x peer", rounds,
                           f"softmax {n}x{n} fp32"))
    return out


def rows(quick: bool = False) -> list[dict]:
    n, rounds = (1 << 20, 3) if quick else (1 << 24, 7)
    out = [cast_row(fmt, n, rounds) for fmt in CAST_FORMATS]
    out += kernel_rows(quick, rounds)
    return out + compile_rows(2 if quick else 3)


def _table(rs: list[dict]) -> str:
    lines = ["| kernel | check | tilepy fast | tilepy exact | peer | peer/tilepy | goal | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        t = r["fast"] if r["fast"] is not None else r["exact"]

        def ms(v):
            return "-" if v is None else f"{v * 1e3:.2f} ms"

        lines.append(f"| {r['kernel']} | {r['check']} | {ms(r['fast'])} | {ms(r['exact'])} "
                     f"| {ms(r['peer'])} ({r['peer_name']}) | {r['peer'] / t:.2f}x "
                     f"| {r['goal']} | {r.get('note', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table(rows(quick="--quick" in sys.argv)))
