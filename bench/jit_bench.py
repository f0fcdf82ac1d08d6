"""JIT benchmark: tilepy's Numba JIT next to numpy (and the interpreter), ratios side by side.

Prints one table: fp32 matmul (exact and fast modes) vs numpy BLAS, softmax / layernorm / rmsnorm
4096x1024 vs numpy unfused, the interpreter vs the JIT, and compile times cold and from the
disk cache (fresh processes). Medians of interleaved rounds; the machine may be shared, so
read the ratios, not the absolute times. Not a test. PyTorch is optional (skipped if absent).

    .venv/bin/python bench/jit_bench.py [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin (PERF_NOTES)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilepy.jit as jit  # noqa: E402
from tilepy.kernels import gemm, layernorm, rmsnorm, softmax  # noqa: E402


def timed(fn, rounds: int) -> float:
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def interleave(fns: dict, rounds: int) -> dict:
    """Median seconds per competitor, rounds interleaved (each call once per round)."""
    for f in fns.values():
        f()  # warm up (compiles, page faults)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def row(what: str, figures: str) -> None:
    print(f"{what:<34} {figures}")


def bench_matmul(sizes, rounds: int) -> None:
    f = gemm(64, 64, 32, "float32", "float32").func
    k, kf = jit.compile(f), jit.compile(f, fast=True)
    for n in sizes:
        _matmul(k, kf, n, rounds)


def _matmul(k, kf, n: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    out = np.empty((n, n), np.float32)
    sz = {"M": n, "N": n, "K": n}
    t = interleave({"jit": lambda: k({"A": a, "B": b, "C": c}, sz),
                    "fast": lambda: kf({"A": a, "B": b, "C": c}, sz),
                    "numpy": lambda: np.matmul(a, b, out=out)}, rounds)
    gf = {x: 2 * n**3 / t[x] / 1e9 for x in t}
    row(f"fp32 matmul {n}", f"exact {gf['jit']:6.1f} GFLOP/s ({gf['jit'] / gf['numpy']:.2f}x, "
        f"goal 0.5x)  fast {gf['fast']:6.1f} ({gf['fast'] / gf['numpy']:.2f}x, goal 0.9x)  "
        f"numpy {gf['numpy']:6.1f}")


def _softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm_np(x, g, b, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _rmsnorm_np(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w


def bench_rows(M: int, N: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, N)).astype(np.float32)
    g = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    y = np.empty_like(x)
    sz = {"M": M, "N": N}
    cases = {
        "softmax": (jit.compile(softmax(1, 1024).func), {"X": x, "Y": y},
                    lambda: _softmax_np(x)),
        "layernorm": (jit.compile(layernorm().func), {"X": x, "gamma": g, "beta": b, "Y": y},
                      lambda: _layernorm_np(x, g, b)),
        "rmsnorm": (jit.compile(rmsnorm().func), {"X": x, "weight": g, "Y": y},
                    lambda: _rmsnorm_np(x, g)),
    }
    for name, (k, arrs, ref) in cases.items():
        t = interleave({"jit": lambda k=k, arrs=arrs: k(arrs, sz), "numpy": ref}, rounds)
        row(f"{name} {M}x{N} exact", f"jit {t['jit'] * 1e3:7.2f} ms  numpy {t['numpy'] * 1e3:7.2f}"
            f" ms  speedup {t['numpy'] / t['jit']:.2f}x  (goal >= 2x)")


def bench_interp(n: int, rounds: int) -> None:
    from tilepy.interpreter import run as interp_run

    f = gemm(64, 64, 32, "float32", "float32").func
    k = jit.compile(f)
    rng = np.random.default_rng(0)
    arrs = {"A": rng.standard_normal((n, n)).astype(np.float32),
            "B": rng.standard_normal((n, n)).astype(np.float32),
            "C": np.empty((n, n), np.float32)}
    sz = {"M": n, "N": n, "K": n}
    t = interleave({"interp": lambda: interp_run(f, arrs, sz, sanitize=False),
                    "jit": lambda: k(arrs, sz)}, rounds)
    row(f"fp32 gemm {n} interpreter vs jit", f"interp {t['interp'] * 1e3:8.1f} ms  jit "
        f"{t['jit'] * 1e3:7.2f} ms  jit is {t['interp'] / t['jit']:.0f}x faster")


_COMPILE = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from tilepy.kernels import gemm
import tilepy.jit as jit
f = gemm(64, 64, 32, "float32", "float32").func
t1 = time.perf_counter()
k = jit.compile(f)
t2 = time.perf_counter()
print(round(t2 - t1, 3), round(t2 - t0, 3), sum(k.fn.stats.cache_hits.values()))
"""


def bench_compile() -> None:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEPY_CACHE_DIR=d)
        res = []
        for _ in range(3):  # cold, then two warm processes
            out = subprocess.run([sys.executable, "-c", _COMPILE.format(root=str(ROOT))],
                                 env=env, capture_output=True, text=True, check=True)
            res.append(out.stdout.split())
        (c_cold, p_cold, _), (c_w1, p_w1, h1), (c_w2, p_w2, h2) = res
        row("gemm kernel compile, cold", f"{float(c_cold):6.2f} s (process {float(p_cold):.2f}"
            " s)  (goal <= 5 s)")
        warm = statistics.median([float(c_w1), float(c_w2)])
        row("gemm kernel compile, disk cache", f"{warm:6.2f} s (processes {p_w1}, {p_w2} s; "
            f"cache hits {h1}, {h2})  (goal <= 0.3 s)")


def main() -> None:
    quick = "--quick" in sys.argv
    rounds = 3 if quick else 7
    print(f"tilepy.jit benchmark ({os.cpu_count()} CPUs; medians of {rounds} interleaved "
          "rounds; the machine may be shared)")
    bench_compile()
    bench_matmul((256, 512) if quick else (256, 512, 1024, 2048), rounds)
    bench_rows(1024 if quick else 4096, 1024, rounds)
    bench_interp(256, 3)
    row("fast mode", "BLAS np.dot on whole fp32/fp64 gemm tiles + fast-math; other ops as exact")


if __name__ == "__main__":
    main()
