"""JIT benchmark: tilepy's Numba JIT next to numpy, PyTorch and the interpreter, side by side.

Prints one table: compile times cold and from the disk cache (fresh processes); fp32 matmul
(exact and fast modes) vs numpy BLAS; bf16 and fp8-e4m3fn gemm (fp32 accumulation) vs fp32
numpy matmul and the fp32 peak; softmax / layernorm / rmsnorm 4096x1024 vs numpy unfused
and torch CPU; flash-attention forward 1x8x1024x64 vs numpy naive attention and torch SDPA;
conv2d NHWC 32x56x56x64 3x3x64 vs numpy im2col + BLAS; the interpreter vs the JIT on every
kernel. Every row first checks the JIT's output (bits equal to the interpreter where the
numerics contract says so, else an error bound derived in tilepy.kernels.checks or below),
so a wrong kernel is never timed. Times are medians of interleaved rounds (each round runs
every competitor in a burst of back-to-back calls and drops the burst's first call: see
`interleave`), ratios the medians of per-round ratios; the machine may be shared, so read
the ratios, not the times.
Not a test. PyTorch is optional (its columns are skipped when it is absent; it is never a
dependency of tilepy).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/jit_bench.py \
        [--quick] [--only compile,matmul,narrow,rows,attention,conv,interp]

(`make bench-jit` runs exactly that.) The OpenBLAS overrides are unset for this command
only, so numpy's BLAS picks its own kernel for this CPU; tests keep them. The script sets
OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4 for itself: idle thread pools of
Numba, OpenBLAS and torch must not spin while another library runs (docs/perf-log.md).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin (docs/perf-log.md)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import argparse  # noqa: E402
import math  # noqa: E402
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


def _steady_allocator() -> None:
    """Keep freed memory in the process (glibc): large blocks come from the heap and the
    heap is never trimmed, so an array a competitor allocates on each call (numpy's
    temporaries, torch's outputs) reuses mapped pages instead of faulting fresh ones in.
    Every competitor then runs as in a long-running program; this helps the allocating
    ones (numpy, torch), never tilepy's kernels, which write into arrays given to them."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest allowed threshold
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc: the bursts in `interleave` still help
        pass


_steady_allocator()
from tilepy.kernels import checks, conv2d_nhwc, flash_attention, gemm, layernorm, softmax  # noqa: E402,E501

PEAK = 233.0  # fp32 FMA peak of this machine, 2 threads, GFLOP/s (docs/perf-log.md)
_TORCH = None


def torch():
    """torch with 2 threads, or None when it is not installed."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch as t
        except ImportError:
            _TORCH = False
        else:
            t.set_num_threads(2)
            _TORCH = t
    return _TORCH or None


class Timings(dict):
    """Median seconds per competitor, and the median over rounds of per-round ratios (a
    ratio taken within one round is what survives other engineers' load: docs/perf-log.md)."""

    def __init__(self, rounds: dict):
        super().__init__({k: statistics.median(v) for k, v in rounds.items()})
        self.rounds = rounds

    def ratio(self, num: str, den: str) -> float:
        """median_r(time[num][r] / time[den][r]): > 1 when `den` is faster."""
        return statistics.median(a / b for a, b in zip(self.rounds[num], self.rounds[den]))


def interleave(fns: dict, rounds: int, warm: bool = True, burst: int = 3) -> Timings:
    """Times per competitor over `rounds` rounds. In each round every competitor runs a
    burst of `burst` calls back to back, and the round's time is the median of the burst
    without its first call. That first call pays for the state the previous competitor
    left behind, not for its own work: numpy's unfused softmax frees 16 MB temporaries,
    so torch's next output comes back as fresh pages and faults in (several times its own
    time: docs/perf-log.md), and another library's idle thread pool may still hold the CPUs."""
    if warm:
        for f in fns.values():
            f()  # warm up (compiles, page faults)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            ts = []
            for _ in range(burst):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
            times[k].append(statistics.median(ts[1:] if burst > 1 else ts))
    return Timings(times)


def row(what: str, figures: str) -> None:
    print(f"{what:<44} {figures}", flush=True)


# ------------------------------------------------------------------ output checks


class CheckError(AssertionError):
    pass


def check_bound(what: str, got: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> float:
    """|got - ref| <= bound everywhere (no NaN); returns max(err / bound) for the table."""
    g = np.asarray(got).astype(np.float64)
    err = np.abs(g - ref)
    bad = ~(err <= bound)
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        raise CheckError(
            f"{what}: {int(bad.sum())} of {bad.size} elements outside the derived bound; "
            f"first at flat index {i}: expected {ref.reshape(-1)[i]!r} +- "
            f"{bound.reshape(-1)[i]:.3g}, got {g.reshape(-1)[i]!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.nanmax(np.where(err == 0, 0.0, err / bound)))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.itemsize}")


def check_bits(what: str, want: np.ndarray, got: np.ndarray) -> None:
    """The same bits (where both hold a NaN its payload may differ: docs/jit.md)."""
    if want.dtype != got.dtype or want.shape != got.shape:
        raise CheckError(f"{what}: expected {want.dtype}{want.shape}, got "
                         f"{got.dtype}{got.shape}")
    diff = _bits(want) != _bits(got)
    f32 = want.astype(np.float32) if want.dtype.kind == "V" else want
    if f32.dtype.kind == "f":
        g32 = got.astype(np.float32) if got.dtype.kind == "V" else got
        diff &= ~(np.isnan(f32) & np.isnan(g32))
    if diff.any():
        i = np.flatnonzero(diff.reshape(-1))[:3]
        raise CheckError(f"{what}: {int(diff.sum())} of {diff.size} elements differ from "
                         f"the interpreter; at {i.tolist()}: expected "
                         f"{want.reshape(-1)[i]}, got {got.reshape(-1)[i]}")


def interp(func, arrays: dict, sizes: dict) -> None:
    from tilepy.interpreter import run

    run(func, arrays, sizes, sanitize=False)


# ------------------------------------------------------------------ compile times

_COMPILE = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from tilepy.kernels import gemm
import tilepy.jit as jit
f = gemm(64, 64, 32, "float32", "float32").func
if {numba_first}:  # Numba's own start (import, CPU target, its scipy import) goes first,
    # as tilepy starts it: the target set up by precision/numba_target.py (a target built
    # without it gets entries of its own in the disk cache: Numba keys them by features)
    from tilepy.precision.numba_target import configure
    configure()
    import numba
    numba.njit(lambda x: x + 1)(1)
t1 = time.perf_counter()
k = jit.compile(f)
t2 = time.perf_counter()
print(round(t2 - t1, 3), round(t2 - t0, 3), sum(k.fn.stats.cache_hits.values()))
"""


def _compile_run(env: dict, numba_first: bool) -> list[str]:
    code = _COMPILE.format(root=str(ROOT), numba_first=numba_first)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def bench_compile(quick: bool, rounds: int) -> None:
    """Fresh processes: cold (empty cache), then from the disk cache, counting Numba's own
    start in the compile and then not (a process that already ran any Numba code)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEPY_CACHE_DIR=d)
        c_cold, p_cold, _ = _compile_run(env, False)
        warm = [_compile_run(env, False) for _ in range(2)]
        loaded = [_compile_run(env, True) for _ in range(2)]
        row("gemm kernel compile, cold", f"{float(c_cold):6.2f} s (process {float(p_cold):.2f}"
            " s)  (goal <= 5 s)")
        t = statistics.median([float(r[0]) for r in warm])
        row("gemm kernel compile, disk cache", f"{t:6.2f} s, Numba's start included "
            f"(processes {warm[0][1]}, {warm[1][1]} s; cache hits {warm[0][2]}, "
            f"{warm[1][2]})  (goal <= 0.3 s)")
        t = statistics.median([float(r[0]) for r in loaded])
        row("gemm kernel, disk cache, Numba started", f"{t:6.3f} s (cache hits "
            f"{loaded[0][2]}, {loaded[1][2]})  (goal <= 0.3 s)")


# ------------------------------------------------------------------ gemm


def _gemm_bound(a: np.ndarray, b: np.ndarray, exact_products: bool):
    """float64 reference and the contract's bound for an fp32-accumulated gemm: K
    sequential adds (gamma_K), one more rounding per product unless products are exact in
    fp32 (bf16/fp8 inputs), plus the float64 reference's own error (checks.gemm_case)."""
    A, B = a.astype(np.float64), b.astype(np.float64)
    K = A.shape[1]
    s = np.abs(A) @ np.abs(B)
    n = K if exact_products else K + 1
    return A @ B, checks.gamma(n) * s + 2 * checks.gamma(K, 2.0**-53) * s


def _fast_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fast mode (BLAS, FMA, any order) vs the exact sum: any order of K fp32 adds plus one
    rounding per product stays within gamma_{K+1} sum|a||b| (doubled, as docs/jit.md says
    for fast vs exact), plus the float64 reference's own error."""
    K = a.shape[1]
    s = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return 2 * checks.gamma(K + 1) * s + 2 * checks.gamma(K, 2.0**-53) * s


def _time_gemm(what: str, k, kf, a, b, exact_products: bool, rounds: int):
    """Check the exact and fast kernels on n x n inputs, then time them against numpy's
    float32 matmul of the same values, interleaved; (times, GFLOP/s by competitor)."""
    n = a.shape[0]
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    c, cf, out = (np.empty((n, n), np.float32) for _ in range(3))
    sz = {"M": n, "N": n, "K": n}
    k({"A": a, "B": b, "C": c}, sz)
    kf({"A": a, "B": b, "C": cf}, sz)
    ref, bound = _gemm_bound(a, b, exact_products)
    check_bound(f"{what} exact", c, ref, bound)
    check_bound(f"{what} fast", cf, ref, _fast_bound(a, b))
    t = interleave({"jit": lambda: k({"A": a, "B": b, "C": c}, sz),
                    "fast": lambda: kf({"A": a, "B": b, "C": cf}, sz),
                    "numpy": lambda: np.matmul(a32, b32, out=out)}, rounds)
    return t, {x: 2 * n**3 / t[x] / 1e9 for x in t}


def bench_matmul(quick: bool, rounds: int) -> None:
    f = gemm(64, 64, 32, "float32", "float32").func
    k, kf = jit.compile(f), jit.compile(f, fast=True)
    for n in (256, 512) if quick else (256, 512, 1024, 2048):
        _matmul(k, kf, n, rounds)


def _matmul(k, kf, n: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    t, gf = _time_gemm(f"fp32 matmul {n}", k, kf, a, b, False, rounds)
    row(f"fp32 matmul {n}", f"exact {gf['jit']:6.1f} GFLOP/s ({t.ratio('numpy', 'jit'):.2f}x,"
        f" goal 0.5x; {gf['jit'] / PEAK:.2f} of peak)  fast {gf['fast']:6.1f} "
        f"({t.ratio('numpy', 'fast'):.2f}x, goal 0.9x)"
        f"  numpy {gf['numpy']:6.1f}")


NARROW = ("bfloat16", "float8_e4m3fn")


def _narrow_inputs(n: int, dt: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.dtype(dt))
    b = rng.standard_normal((n, n)).astype(np.dtype(dt))
    return a, b


def bench_narrow(quick: bool, rounds: int) -> None:
    """bf16 / fp8 inputs, fp32 accumulation and output, vs numpy fp32 matmul (same shape)."""
    for dt in NARROW:
        f = gemm(64, 64, 32, dt, "float32").func
        k, kf = jit.compile(f), jit.compile(f, fast=True)
        for n in (512, 1024) if quick else (512, 1024, 2048):
            _narrow(dt, k, kf, n, rounds)


def _narrow(dt: str, k, kf, n: int, rounds: int) -> None:
    a, b = _narrow_inputs(n, dt)
    t, gf = _time_gemm(f"{dt} gemm {n}", k, kf, a, b, True, rounds)
    short = "bf16" if dt == "bfloat16" else "fp8e4m3"
    row(f"{short} gemm {n} (fp32 acc)",
        f"exact {gf['jit']:6.1f} GFLOP/s ({t.ratio('numpy', 'jit'):.2f}x numpy fp32, "
        f"{gf['jit'] / PEAK:.2f} of peak)  fast {gf['fast']:6.1f} "
        f"({t.ratio('numpy', 'fast'):.2f}x)  numpy fp32 {gf['numpy']:6.1f}")


# ------------------------------------------------------------------ row kernels


def _softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm_np(x, g, b, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _rmsnorm_np(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w


def _torch_rows(name: str, inputs: list):
    t = torch()
    if t is None:
        return None
    xs = [t.from_numpy(v) for v in inputs]
    F = t.nn.functional
    n = inputs[0].shape[1]
    return {"softmax": lambda: t.softmax(xs[0], 1),
            "layernorm": lambda: F.layer_norm(xs[0], (n,), xs[1], xs[2], eps=1e-5),
            "rmsnorm": lambda: F.rms_norm(xs[0], (n,), xs[1], eps=1e-6)}[name]


def bench_rows(quick: bool, rounds: int) -> None:
    M, N = (1024 if quick else 4096), 1024
    rng = np.random.default_rng(0)
    # inputs, float64 references and bounds from tilepy.kernels.checks; softmax runs the
    # kernel's default rows per block (its case uses 1; a row's result does not depend on it)
    sm = checks.softmax_case(rng, M, N, block_N=1024)
    sm.kernel = softmax(block_N=1024)
    # layernorm too runs the kernel's defaults (8 rows of 1024: a row is read once); its
    # case's 4 x 256 tiles stream each row three times. The bound does not depend on them.
    ln = checks.layernorm_case(rng, M, N)
    ln.kernel = layernorm()
    cases = {
        "softmax": (sm, ("X", "Y"), _softmax_np),
        "layernorm": (ln, ("X", "gamma", "beta", "Y"), _layernorm_np),
        "rmsnorm": (checks.rmsnorm_case(rng, M, N), ("X", "weight", "Y"), _rmsnorm_np),
    }
    for name, (case, names, np_ref) in cases.items():
        _row(name, case, names, np_ref, M, N, rounds)


def _row(name: str, case, names, np_ref, M: int, N: int, rounds: int) -> None:
    f = case.kernel.func
    k, kf = jit.compile(f), jit.compile(f, fast=True)
    arrs = dict(zip(names, case.inputs + [np.empty((M, N), np.float32)]))
    arrs_f = {**arrs, names[-1]: np.empty((M, N), np.float32)}
    sz = {"M": M, "N": N}
    k(arrs, sz)
    kf(arrs_f, sz)
    for what, got in (("exact", arrs[names[-1]]), ("fast", arrs_f[names[-1]])):
        check_bound(f"{name} {M}x{N} {what}", got, case.reference, case.bound)
    fns = {"jit": lambda: k(arrs, sz), "fast": lambda: kf(arrs_f, sz),
           "numpy": lambda: np_ref(*case.inputs)}
    tr = _torch_rows(name, case.inputs)
    if tr is not None:
        fns["torch"] = tr
    t = interleave(fns, rounds)
    ms = {x: v * 1e3 for x, v in t.items()}
    vs_torch = (f"  torch {ms['torch']:6.2f} ms  fast/torch {t.ratio('torch', 'fast'):.2f}x"
                " (goal >= 1x)") if tr is not None else "  torch: not installed"
    row(f"{name} {M}x{N}", f"exact {ms['jit']:6.2f} ms ({t.ratio('numpy', 'jit'):.2f}x numpy,"
        f" goal >= 2x)  fast {ms['fast']:6.2f} ms  numpy {ms['numpy']:6.2f} ms{vs_torch}")


# ------------------------------------------------------------------ attention


def _attention_np(q, k, v):
    """Naive attention in fp32: softmax(Q K^T / sqrt(d)) V, materialising the scores."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(1 / math.sqrt(q.shape[-1]))
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def bench_attention(quick: bool, rounds: int) -> None:
    B, H, S, D = 1, 8, (512 if quick else 1024), 64
    case = checks.attention_case(np.random.default_rng(0), B, H, S, D, False)
    f = case.kernel.func
    # each mode runs the tiles it is fastest with (a sweep over 64..512 x 64..1024:
    # docs/perf-log.md): exact 64 x 64 (the case's kernel); fast 256 x 256, whose BLAS
    # gemms are 256 x 256 x 64
    fast_tiles = flash_attention(B, H, S, D, block_M=256, block_N=256).func
    k, kf = jit.compile(f), jit.compile(fast_tiles, fast=True)
    q, kk, v = case.inputs
    out, out_f, want = (np.empty_like(q) for _ in range(3))
    arrs, arrs_f = {"Q": q, "K": kk, "V": v, "O": out}, {"Q": q, "K": kk, "V": v, "O": out_f}
    k(arrs, {})
    kf(arrs_f, {})
    interp(f, {"Q": q, "K": kk, "V": v, "O": want}, {})
    check_bits(f"flash attention {B}x{H}x{S}x{D} exact", want, out)
    check_bound(f"flash attention {B}x{H}x{S}x{D} exact", out, case.reference, case.bound)
    check_bound(f"flash attention {B}x{H}x{S}x{D} fast", out_f, case.reference, case.bound)
    fns = {"jit": lambda: k(arrs, {}), "fast": lambda: kf(arrs_f, {}),
           "numpy": lambda: _attention_np(q, kk, v)}
    t_ = torch()
    if t_ is not None:
        tq, tk, tv = (t_.from_numpy(x) for x in (q, kk, v))
        sdpa = t_.nn.functional.scaled_dot_product_attention
        fns["torch"] = lambda: sdpa(tq, tk, tv)
    t = interleave(fns, rounds)
    ms = {x: s * 1e3 for x, s in t.items()}
    gf = 4 * B * H * S * S * D / t["jit"] / 1e9
    vs_torch = (f"  torch SDPA {ms['torch']:6.2f} ms  fast/torch {t.ratio('torch', 'fast'):.2f}x "
                "(goal >= 1x)") if "torch" in t else "  torch: not installed"
    row(f"flash attention {B}x{H}x{S}x{D} fp32", f"exact {ms['jit']:6.2f} ms ({gf:.0f} GFLOP/s, "
        f"{t.ratio('numpy', 'jit'):.2f}x numpy)  fast (256x256 tiles) {ms['fast']:6.2f} ms "
        f"({t.ratio('numpy', 'fast'):.2f}x)  numpy naive {ms['numpy']:6.2f} ms{vs_torch}")


# ------------------------------------------------------------------ conv


class Im2col:
    """conv2d NHWC with (KH, KW, C, F) filters as numpy im2col + one BLAS matmul: the
    column buffer (rows N*OH*OW, columns in (kh, kw, c) order, matching the filters viewed
    as a (KH*KW*C, F) matrix) and the output are allocated once."""

    def __init__(self, x: np.ndarray, w: np.ndarray, pad: int, dtype=np.float32):
        N, H, W, C = x.shape
        KH, KW, _, F = w.shape
        self.OH, self.OW = H + 2 * pad - KH + 1, W + 2 * pad - KW + 1
        self.xp = np.zeros((N, H + 2 * pad, W + 2 * pad, C), dtype)
        self.cols = np.empty((N, self.OH, self.OW, KH * KW * C), dtype)
        self.wm = w.astype(dtype).reshape(KH * KW * C, F)
        self.y = np.empty((N, self.OH, self.OW, F), dtype)
        self.x, self.pad, self.k = x, pad, (KH, KW, C)

    def __call__(self) -> np.ndarray:
        KH, KW, C = self.k
        p = self.pad
        self.xp[:, p:self.xp.shape[1] - p, p:self.xp.shape[2] - p] = self.x
        for kh in range(KH):
            for kw in range(KW):
                j = (kh * KW + kw) * C
                self.cols[..., j:j + C] = self.xp[:, kh:kh + self.OH, kw:kw + self.OW]
        n = self.cols.shape[0] * self.OH * self.OW
        np.matmul(self.cols.reshape(n, -1), self.wm, out=self.y.reshape(n, -1))
        return self.y


def _conv_reference(x, w, pad):
    """float64 im2col reference and the bound of an fp32 gemm of depth KH*KW*C: one rounding
    per product and per add, gamma_{depth+1} sum|x||w| (checks.conv_case's derivation; it
    holds for any summation order, so for BLAS too), plus the float64 reference's error."""
    ref = Im2col(x.astype(np.float64), w, pad, np.float64)().copy()
    absum = Im2col(np.abs(x.astype(np.float64)), np.abs(w), pad, np.float64)()
    depth = w.shape[0] * w.shape[1] * w.shape[2]
    return ref, (checks.gamma(depth + 1) + 2 * checks.gamma(depth, 2.0**-53)) * absum


def _conv_inputs(N, H, W, C, F, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = rng.standard_normal((3, 3, C, F)).astype(np.float32)
    return x, w


def bench_conv(quick: bool, rounds: int) -> None:
    N, H, W, C, F = (8 if quick else 32), 56, 56, 64, 64
    x, w = _conv_inputs(N, H, W, C, F)
    f = conv2d_nhwc(N, H, W, C, F, 3, 3, 1, 1).func
    k, kf = jit.compile(f), jit.compile(f, fast=True)
    y, yf = np.empty((N, H, W, F), np.float32), np.empty((N, H, W, F), np.float32)
    k({"X": x, "Wt": w, "Y": y}, {})
    kf({"X": x, "Wt": w, "Y": yf}, {})
    im2col = Im2col(x, w, 1)
    ref, bound = _conv_reference(x, w, 1)
    what = f"conv2d {N}x{H}x{W}x{C} 3x3x{F}"
    check_bound(f"{what} exact", y, ref, bound)
    check_bound(f"{what} fast", yf, ref, bound)
    check_bound(f"{what} numpy im2col", im2col(), ref, bound)
    t = interleave({"jit": lambda: k({"X": x, "Wt": w, "Y": y}, {}),
                    "fast": lambda: kf({"X": x, "Wt": w, "Y": yf}, {}),
                    "numpy": im2col}, rounds)
    gf = {z: 2 * N * H * W * F * 9 * C / s / 1e9 for z, s in t.items()}
    row(f"{what} NHWC", f"exact {t['jit'] * 1e3:6.1f} ms ({gf['jit']:.0f} GFLOP/s, "
        f"{t.ratio('numpy', 'jit'):.2f}x numpy)  fast {t['fast'] * 1e3:6.1f} ms "
        f"({t.ratio('numpy', 'fast'):.2f}x)  im2col+BLAS {t['numpy'] * 1e3:6.1f} ms "
        f"({gf['numpy']:.0f} GFLOP/s)")


# ------------------------------------------------------------------ interpreter vs JIT


def _interp_rows(quick: bool):
    """(label, func, arrays, sizes, output name) at sizes the interpreter runs in ~1 s."""
    rng = np.random.default_rng(1)
    f32 = {"A": rng.standard_normal((256, 256)).astype(np.float32),
           "B": rng.standard_normal((256, 256)).astype(np.float32)}
    yield ("fp32 gemm 256", gemm(64, 64, 32, "float32", "float32").func, f32,
           {"M": 256, "N": 256, "K": 256}, "C", (256, 256))
    for dt in NARROW:
        a, b = _narrow_inputs(512, dt, seed=1)
        yield (f"{'bf16' if dt == 'bfloat16' else 'fp8e4m3'} gemm 512",
               gemm(64, 64, 32, dt, "float32").func, {"A": a, "B": b},
               {"M": 512, "N": 512, "K": 512}, "C", (512, 512))
    S = 512 if quick else 1024
    case = checks.attention_case(rng, 1, 8, S, 64, False)
    yield (f"flash attention 1x8x{S}x64", case.kernel.func,
           dict(zip("QKV", case.inputs)), {}, "O", (1, 8, S, 64))
    x, w = _conv_inputs(8, 28, 28, 64, 64, seed=1)
    yield ("conv2d 8x28x28x64 3x3x64", conv2d_nhwc(8, 28, 28, 64, 64, 3, 3, 1, 1).func,
           {"X": x, "Wt": w}, {}, "Y", (8, 28, 28, 64))


def bench_interp(quick: bool, rounds: int) -> None:
    for label, f, ins, sz, out_name, shape in _interp_rows(quick):
        _interp_row(label, f, ins, sz, out_name, shape)


def _interp_row(label: str, f, ins: dict, sz: dict, out_name: str, shape) -> None:
    k = jit.compile(f)
    a_i = {**ins, out_name: np.zeros(shape, np.float32)}
    a_j = {**ins, out_name: np.zeros(shape, np.float32)}
    interp(f, a_i, sz)
    k(a_j, sz)
    check_bits(f"{label}: jit vs interpreter", a_i[out_name], a_j[out_name])
    t = interleave({"interp": lambda: interp(f, a_i, sz), "jit": lambda: k(a_j, sz)},
                   3, warm=False)
    row(f"{label}: interp vs jit", f"interp {t['interp'] * 1e3:8.1f} ms  jit "
        f"{t['jit'] * 1e3:7.2f} ms  jit is {t.ratio('interp', 'jit'):.0f}x faster "
        "(bits equal)")


SECTIONS = {"compile": bench_compile, "matmul": bench_matmul, "narrow": bench_narrow,
            "rows": bench_rows, "attention": bench_attention, "conv": bench_conv,
            "interp": bench_interp}


def _sections(text: str | None) -> list[str]:
    if text is None:
        return list(SECTIONS)
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown or not names:
        raise SystemExit(f"jit_bench: --only expects one or more of {', '.join(SECTIONS)} "
                         f"(comma-separated); got {text!r}")
    return names


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, smaller sizes")
    ap.add_argument("--only", metavar="NAME", help=f"run only these sections "
                    f"(comma-separated): {', '.join(SECTIONS)}")
    args = ap.parse_args(argv)
    names = _sections(args.only)
    rounds = 3 if args.quick else 7
    t = torch() if {"rows", "attention"} & set(names) else None
    threads = f"torch {t.__version__} with {t.get_num_threads()} threads" if t else \
        "torch not installed or not needed"
    print(f"tilepy.jit benchmark ({os.cpu_count()} CPUs; medians of {rounds} interleaved "
          f"rounds, ratios per round; the machine may be shared; {threads}; fp32 peak "
          f"{PEAK:.0f} GFLOP/s)")
    for name in names:
        SECTIONS[name](args.quick, rounds)
    if set(names) - {"compile", "interp"}:
        row("fast mode", "Numba fast-math everywhere; BLAS for gemms: a launch that is one "
            "product (the library gemm) as one call with BLAS's threads, else one call per "
            "whole float32/float64 tile (narrow inputs held as float32 included); checked "
            "with derived bounds")


if __name__ == "__main__":
    main()
