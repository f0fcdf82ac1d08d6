"""Interpreter speed on Triton's three tutorial kernels, written in tilepy.

The kernels mirror the tutorials: vector add (n = 2^20, BLOCK 1024), fused row softmax
(4096 x 1024, one row per program) and matmul (512^3 fp32, blocks 64/64/32). Triton's
interpreter (TRITON_INTERPRET=1) was measured on this kind of machine at 0.55 s, 6.5 s and
1.3 s; the goal is 20x faster. "exact numpy" is the same numerics written directly in numpy
(the floor an interpreter can approach); "cpu" is process CPU time (all threads).

"matmul 1 thread" is the matmul with the interpreter's gemm worker thread switched off
(TILEPY_INTERP_THREADS=1), its rounds interleaved with the default matmul's; nothing else
in this script changes the environment.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/interp_vs_triton.py [ROUNDS]
(`make bench`; the two variables are unset for this command only: they slow numpy here).
Medians of rounds, default 7; each kernel's rounds alternate tilepy and numpy. Kernels are
measured one after the other, not mixed: a matmul run just before it made the next vector
add 2-3x slower for numpy and tilepy alike, through the allocator returning freed memory
that then has to be faulted in again.

As in bench/jit_bench.py, each round runs tilepy in a burst of three calls; a round's time
is the median of the last two (the speedup column), and the first call's median is printed
next to it ("first"): that call pays for the state the exact-numpy round left behind (its
freed temporaries faulting in again, caches; docs/perf-log.md).
"""

import os
import statistics
import sys
import time

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.kernels import gemm

TRITON_S = {"vector add": 0.55, "softmax": 6.5, "matmul": 1.3, "matmul 1 thread": 1.3}
BURST = 3  # calls per round; the first is reported apart (see the docstring)


@tilepy.jit(out_idx=[-1])
def vector_add(block=1024):
    n = T.symbolic("n")

    @T.prim_func
    def add(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"),
            Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as pid:
            x = T.alloc_fragment((block,), "float32")
            y = T.alloc_fragment((block,), "float32")
            T.copy(X[pid * block], x)
            T.copy(Y[pid * block], y)
            for i in T.Parallel(block):
                x[i] = x[i] + y[i]
            T.copy(x, Z[pid * block])

    return add


@tilepy.jit(out_idx=[-1])
def softmax_rows(block=1024):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def softmax(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M) as row:
            x = T.alloc_fragment((block,), "float32")
            mx = T.alloc_fragment((1,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.copy(X[row, 0], x)
            for i in T.Parallel(block):
                if i >= N:
                    x[i] = -T.infinity("float32")
            T.reduce_max(x, mx, dim=0)
            for i in T.Parallel(block):
                x[i] = T.exp(x[i] - mx[0])
            T.reduce_sum(x, total, dim=0)
            for i in T.Parallel(block):
                x[i] = x[i] / total[0]
            T.copy(x, Y[row, 0])

    return softmax


def exact_numpy(name: str, x, y, s, a, b):
    """The same numerics in plain numpy, no interpreter: the floor batching can approach
    (softmax: float64 exp rounded once, sequential sums; matmul: sequential-k float32)."""
    if name == "vector add":
        return x + y
    if name == "softmax":
        e = np.exp((s - s.max(axis=1, keepdims=True)).astype(np.float64)).astype(np.float32)
        return e / np.add.accumulate(e, axis=1)[:, -1:]
    acc = np.zeros((512, 512), np.float32)
    tmp = np.empty_like(acc)
    for k in range(512):
        np.multiply(a[:, k:k + 1], b[k:k + 1, :], out=tmp)
        np.add(acc, tmp, out=acc)
    return acc


def _one_thread(mm, a, b):
    old = os.environ.get("TILEPY_INTERP_THREADS")
    os.environ["TILEPY_INTERP_THREADS"] = "1"
    try:
        return mm(a, b)
    finally:
        if old is None:
            del os.environ["TILEPY_INTERP_THREADS"]
        else:
            os.environ["TILEPY_INTERP_THREADS"] = old


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main(rounds: int = 7):
    rng = np.random.default_rng(0)
    n = 1 << 20
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    s = rng.standard_normal((4096, 1024), np.float32)
    a = rng.standard_normal((512, 512), np.float32)
    b = rng.standard_normal((512, 512), np.float32)
    mm = gemm(64, 64, 32, "float32", "float32")
    ours = {"vector add": lambda: vector_add()(x, y), "softmax": lambda: softmax_rows()(s),
            "matmul": lambda: mm(a, b), "matmul 1 thread": lambda: _one_thread(mm, a, b)}
    wall = {k: [] for k in ours}
    first = {k: [] for k in ours}
    cpu = {k: [] for k in ours}
    floor = {k: [] for k in ours}
    with tilepy.backend("interp"):
        for group in (["vector add"], ["softmax"], ["matmul", "matmul 1 thread"]):
            for name in group:
                ours[name]()  # build the IR once
            for _ in range(rounds):  # tilepy and numpy interleaved: the machine drifts
                for name in group:
                    burst = [_timed(ours[name]) for _ in range(BURST)]
                    first[name].append(burst[0][0])
                    wall[name].append(statistics.median(w for w, _ in burst[1:]))
                    cpu[name].append(statistics.median(c for _, c in burst[1:]))
                    floor[name].append(_timed(lambda n=name: exact_numpy(n, x, y, s, a,
                                                                        b))[0])
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'kernel':15} {'tilepy interp':>14} {'cpu':>9} {'first':>9} {'Triton interp':>14} "
          f"{'speedup':>8} {'goal 20x':>9} {'exact numpy':>12} {'/ numpy':>8}")
    for name in ours:
        t, c, t1, f = (statistics.median(v[name]) for v in (wall, cpu, first, floor))
        speedup = TRITON_S[name] / t
        print(f"{name:15} {t * 1e3:11.1f} ms {c * 1e3:6.1f} ms {t1 * 1e3:6.1f} ms "
              f"{TRITON_S[name] * 1e3:11.0f} ms {speedup:7.1f}x "
              f"{'met' if speedup >= 20 else 'MISSED':>9} {f * 1e3:9.1f} ms {t / f:7.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
