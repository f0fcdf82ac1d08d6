"""Issue #18 rows for existing code paths: `tilepy.precision.cast` (the Numba encoders behind
it) against ml_dtypes' astype; the library gemm's compile, cold and from the disk cache,
each in a fresh process, against the issue's goals; the library gemm (fp32 at 512 and
1024 with a one-thread note, bf16, fp8 inputs) against numpy, and softmax at 1024 and 4096
rows of 1024 against numpy and torch, in exact and fast mode.

Follows bench18's protocol: `rows(quick)` checks every output before timing it, then takes
the minimum over alternating rounds (bursts of two calls: `_best`). The cast rows run
tilepy at 1 and 2 threads (ml_dtypes is single-threaded; the row's time is the 1-thread
one, the note gives 2). Compile rows time
fresh processes (the seconds of the compile call; the note gives its CPU seconds, which a
busy machine inflates less). Usage:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lib_core.py [--quick]
"""

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


def _best(fns: dict, rounds: int, burst: int = 2, clock=time.perf_counter) -> dict:
    """Minimum seconds per callable over `rounds` alternating rounds, after a warm-up. In a
    round each callable runs `burst` times back to back: the first call after another
    competitor pays for what that one left (freed temporaries that fault back in, a thread
    pool still waking), not for its own work (docs/perf-log.md)."""
    for f in fns.values():
        f()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, f in fns.items():
            for _ in range(burst):
                t = clock()
                f()
                best[name] = min(best[name], clock() - t)
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


def _checked(case, what: str):
    """(run(fast), worst error/bound): exact and fast mode of a tilepy.kernels.checks case,
    each output checked against the case's float64 reference and derived bound."""
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
    return run, worst


def _numpy_blas_threads(n: int | None) -> int | None:
    """Set numpy's OpenBLAS thread count (None: leave it); returns the count before, or None
    where numpy's BLAS is not a wheel's OpenBLAS."""
    import ctypes
    import glob

    for lib in glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs",
                                      "*openblas*")):
        dll = ctypes.CDLL(lib)
        for suf in ("64_", ""):
            get = getattr(dll, f"scipy_openblas_get_num_threads{suf}", None)
            put = getattr(dll, f"scipy_openblas_set_num_threads{suf}", None)
            if get is not None and put is not None:
                before = get()
                if n is not None:
                    put.argtypes = [ctypes.c_int]
                    put(n)
                return before
    return None


def _one_thread_gemm(run, a, b, rounds: int) -> str:
    """Exact gemm and numpy's matmul, both on one thread (CPU seconds: a busy machine
    inflates them far less than two-thread wall times), as a note."""
    import numba

    threads, before = numba.get_num_threads(), _numpy_blas_threads(1)
    if before is None:
        return "1 thread: numpy's BLAS thread count not settable"
    numba.set_num_threads(1)
    try:
        cpu = _best({"exact": lambda: run(False), "peer": lambda: a @ b}, rounds,
                    clock=time.process_time)
    finally:
        numba.set_num_threads(threads)
        _numpy_blas_threads(before)
    gf = {k: 2 * a.shape[0] ** 3 / v / 1e9 for k, v in cpu.items()}
    return (f"1 thread: exact {gf['exact']:.0f}, numpy {gf['peer']:.0f} GFLOP/s "
            f"({cpu['peer'] / cpu['exact']:.2f}x)")


def gemm_rows(quick: bool, rounds: int) -> list[dict]:
    rng = np.random.default_rng(0)
    n = 256 if quick else 1024
    cases = [("float32", m, "exact >= 0.7x, fast >= 0.9x peer")
             for m in ((128, 256) if quick else (512, 1024))]
    cases += [(dt, n, "fast >= 0.9x peer") for dt in ("bfloat16", "float8_e4m3fn")]
    return [_gemm_row(rng, dt, m, goal, rounds) for dt, m, goal in cases]


def _gemm_row(rng, dt: str, m: int, goal: str, rounds: int) -> dict:
    from tilepy.kernels import checks

    what = f"gemm {dt} {m}^3, fp32 acc"
    case = checks.gemm_case(rng, m, m, m, dt)
    run, worst = _checked(case, what)
    a, b = (x.astype(np.float32) for x in case.inputs)
    best = _best({"exact": lambda: run(False), "fast": lambda: run(True),
                  "peer": lambda: a @ b}, rounds)
    gf = {k: 2 * m ** 3 / v / 1e9 for k, v in best.items()}
    note = f"GFLOP/s: exact {gf['exact']:.0f}, fast {gf['fast']:.0f}, numpy {gf['peer']:.0f}"
    if dt == "float32":
        note += "; " + _one_thread_gemm(run, a, b, rounds)
    return {"kernel": what, "check": f"ok, max err/bound {worst:.2g} <= 1",
            "fast": best["fast"], "exact": best["exact"], "peer": best["peer"],
            "peer_name": "numpy fp32 matmul (BLAS)", "goal": goal, "note": note}


def _exp_rows():
    """What exact softmax cannot avoid, per element: one read, the contract's exp (float64,
    rounded to float32), one write; in softmax's blocks of 8 rows of 1024. Its time is a
    floor under exact softmax's at the same size and threads."""
    import tilepy
    import tilepy.language as T

    @tilepy.jit(out_idx=[-1])
    def exp_rows(block_M=8, block_N=1024):
        M, N = T.symbolic("M"), T.symbolic("N")

        @T.prim_func
        def exp_rows(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
                x = T.alloc_fragment((block_M, block_N), "float32")
                T.copy(X[bx * block_M, 0], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp(x[i, j])
                T.copy(x, Y[bx * block_M, 0])

        return exp_rows

    return exp_rows()


def _torch():
    import numba

    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return torch


def softmax_rows(quick: bool, rounds: int) -> list[dict]:
    """Two sizes: 1024 rows keep numpy's 4 MiB temporaries in the 32 MiB L3 (numpy at its
    best), 4096 rows do not (the size bench/jit_bench.py uses); exact mode is bound by its
    float64 exp at both, so its ratio to numpy moves with the size (docs/perf-log.md)."""
    rng, torch, floor = np.random.default_rng(0), _torch(), _exp_rows()
    out = []
    for M in ((256, 1024) if quick else (1024, 4096)):
        out += _softmax_pair(rng, M, torch, floor, rounds)
    return out


def _softmax_pair(rng, M: int, torch, floor, rounds: int) -> list[dict]:
    """Softmax M x 1024 against numpy (exact's goal) and torch (fast's goal), timed in one
    set of rounds with the exp floor kernel."""
    import tilepy
    from tilepy.kernels import checks, softmax

    what = f"softmax {M}x1024 fp32"
    case = checks.softmax_case(rng, M, 1024, block_N=1024)
    case.kernel = softmax(block_N=1024)
    run, worst = _checked(case, what)
    x = case.inputs[0]
    with tilepy.backend("jit"):
        e = floor(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    if not np.all(np.abs(e - ref) <= 2.0**-24 * ref):  # one rounding of exp
        raise AssertionError(f"{what}: the exp floor kernel is off by more than 0.5 ulp")

    def np_softmax():
        ex = np.exp(x - x.max(axis=1, keepdims=True))
        return ex / ex.sum(axis=1, keepdims=True)

    def exp_only():
        with tilepy.backend("jit"):
            floor(x)

    fns = {"exact": lambda: run(False), "fast": lambda: run(True), "numpy": np_softmax,
           "floor": exp_only}
    if torch is not None:
        tx = torch.from_numpy(x)
        fns["torch"] = lambda: torch.softmax(tx, 1)
    t = _best(fns, rounds)
    one = _one_thread_softmax(fns, torch, rounds) if torch is not None else ""
    check = f"ok, max err/bound {worst:.2g} <= 1"
    return [
        {"kernel": what, "check": check, "fast": t["fast"], "exact": t["exact"],
         "peer": t["numpy"], "peer_name": "numpy unfused", "goal": "exact >= 2x peer",
         "note": f"the contract's float64 exp alone (read, exp, write): "
                 f"{t['floor'] * 1e3:.2f} ms, {t['numpy'] / t['floor']:.2f}x numpy"},
        {"kernel": what, "check": check, "fast": t["fast"], "exact": t["exact"],
         "peer": t.get("torch"), "peer_name": "torch CPU" if torch is not None
         else "torch not installed", "goal": "fast >= 1x peer", "note": one},
    ]


def _one_thread_softmax(fns: dict, torch, rounds: int) -> str:
    """Fast softmax and torch's, both on one thread in CPU seconds (a busy machine inflates
    them far less than two-thread wall times), as a note."""
    import numba

    threads, tt = numba.get_num_threads(), torch.get_num_threads()
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    try:
        cpu = _best({k: fns[k] for k in ("fast", "torch")}, rounds, clock=time.process_time)
    finally:
        numba.set_num_threads(threads)
        torch.set_num_threads(tt)
    return (f"1 thread CPU: fast {cpu['fast'] * 1e3:.3f} ms, torch {cpu['torch'] * 1e3:.3f} "
            f"ms ({cpu['torch'] / cpu['fast']:.2f}x)")


def rows(quick: bool = False) -> list[dict]:
    n, rounds = (1 << 20, 3) if quick else (1 << 24, 7)
    out = [cast_row(fmt, n, rounds) for fmt in CAST_FORMATS]
    out += gemm_rows(quick, rounds) + softmax_rows(quick, rounds)
    return out + compile_rows(2 if quick else 3)


def _table(rs: list[dict]) -> str:
    lines = ["| kernel | check | tilepy fast | tilepy exact | peer | peer/tilepy | goal | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        t = r["fast"] if r["fast"] is not None else r["exact"]

        def ms(v):
            return "-" if v is None else f"{v * 1e3:.2f} ms"

        lines.append(f"| {r['kernel']} | {r['check']} | {ms(r['fast'])} | {ms(r['exact'])} "
                     f"| {ms(r['peer'])} ({r['peer_name']}) | "
                     f"{'-' if r['peer'] is None else format(r['peer'] / t, '.2f') + 'x'} "
                     f"| {r['goal']} | {r.get('note', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table(rows(quick="--quick" in sys.argv)))
