"""The issue's three interpreter benchmarks (not a test): vector add 2^20 (BLOCK 1024), row
softmax 4096x1024 (one row per program), matmul 512^3 fp32 (64/64/32, pipelined k-loop of
copies + T.gemm). Prints the median of several rounds and the ratio to Triton's
interpreter on this machine (0.55 s, 6.5 s, 1.3 s; the target is >= 20x).

    .venv/bin/python tests/interpreter/bench_interp.py [--rounds 7] [--no-sanitize]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tilepy.language as T
from tilepy.interpreter import run

TRITON_S = {"vector_add": 0.55, "softmax": 6.5, "matmul": 1.3}


def vector_add_kernel(n: int, block: int = 1024):
    @T.prim_func
    def vector_add(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
                   C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < n:
                    C[idx] = A[idx] + B[idx]

    return vector_add


def softmax_kernel(m: int, n: int):
    @T.prim_func
    def softmax(X: T.Tensor((m, n), "float32"), Y: T.Tensor((m, n), "float32")):
        with T.Kernel(m) as bx:
            x = T.alloc_fragment((n,), "float32")
            mx = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, 0], x)
            T.reduce_max(x, mx, dim=0)
            for i in T.Parallel(n):
                x[i] = T.exp(x[i] - mx[0])
            T.reduce_sum(x, s, dim=0)
            for i in T.Parallel(n):
                x[i] = x[i] / s[0]
            T.copy(x, Y[bx, 0])

    return softmax


def matmul_kernel(M, N, K, bm=64, bn=64, bk=32, dtype="float32", accum="float32"):
    @T.prim_func
    def matmul(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
               C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return matmul


def cases():
    rng = np.random.default_rng(0)
    n = 1 << 20
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x = rng.standard_normal((4096, 1024), dtype=np.float32)
    A = rng.standard_normal((512, 512), dtype=np.float32)
    B = rng.standard_normal((512, 512), dtype=np.float32)
    return {
        "vector_add": (vector_add_kernel(n), lambda: dict(A=a, B=b, C=np.empty_like(a))),
        "softmax": (softmax_kernel(4096, 1024), lambda: dict(X=x, Y=np.empty_like(x))),
        "matmul": (matmul_kernel(512, 512, 512),
                   lambda: dict(A=A, B=B, C=np.empty((512, 512), np.float32))),
    }


def numpy_floor(name: str, arrays: dict) -> None:
    """The same numerics in plain numpy, no interpreter: what batching can approach."""
    if name == "vector_add":
        np.add(arrays["A"], arrays["B"], out=arrays["C"])
    elif name == "softmax":
        x = arrays["X"]
        e = np.exp((x - x.max(axis=1, keepdims=True)).astype(np.float64)).astype(np.float32)
        s = np.add.accumulate(e, axis=1)[:, -1:]
        np.divide(e, s, out=arrays["Y"])
    else:  # sequential-k gemm over all 64 output tiles at once (PERF_NOTES' 52 ms form)
        A, B = arrays["A"], arrays["B"]
        at = A.reshape(8, 64, 512).transpose(0, 2, 1)[:, None]  # (8, 1, K, 64)
        bt = B.reshape(512, 8, 64).transpose(1, 0, 2)[None]  # (1, 8, K, 64)
        acc = np.zeros((8, 8, 64, 64), np.float32)
        tmp = np.empty_like(acc)
        for k in range(512):
            np.multiply(at[:, :, k, :, None], bt[:, :, k, None, :], out=tmp)
            np.add(acc, tmp, out=acc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-sanitize", action="store_true")
    ap.add_argument("--no-threads", action="store_true", help="gemm on one thread")
    args = ap.parse_args()
    if args.no_threads:
        import sys

        sys.modules["tilepy.interpreter.accumulate"]._THREAD_MIN = 1 << 62
    cs = cases()
    times = {k: [] for k in cs}
    cpu = {k: [] for k in cs}
    floor = {k: [] for k in cs}
    floor_cpu = {k: [] for k in cs}
    for _ in range(args.rounds):  # interleaved rounds: the machine is shared and drifts
        for name, (kern, make) in cs.items():
            arrays = make()
            t0, c0 = time.perf_counter(), time.process_time()
            run(kern.func, arrays, {}, sanitize=not args.no_sanitize)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            arrays = make()
            t0, c0 = time.perf_counter(), time.process_time()
            numpy_floor(name, arrays)
            floor[name].append(time.perf_counter() - t0)
            floor_cpu[name].append(time.process_time() - c0)
    print(f"{'benchmark':12s} {'median ms':>10s} {'min ms':>8s} {'cpu ms':>8s} "
          f"{'x Triton interp':>16s} {'numpy floor ms':>15s} {'/ floor':>8s} "
          f"{'floor cpu ms':>13s} {'cpu / floor cpu':>16s}")
    for name, ts in times.items():
        med, fl = statistics.median(ts), statistics.median(floor[name])
        print(f"{name:12s} {med * 1e3:10.1f} {min(ts) * 1e3:8.1f} "
              f"{statistics.median(cpu[name]) * 1e3:8.1f} {TRITON_S[name] / med:16.1f} "
              f"{fl * 1e3:15.1f} {med / fl:8.2f} {statistics.median(floor_cpu[name]) * 1e3:13.1f} "
              f"{statistics.median(cpu[name]) / statistics.median(floor_cpu[name]):16.2f}")


if __name__ == "__main__":
    main()
