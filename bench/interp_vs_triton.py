"""Interpreter speed on Triton's three tutorial kernels, written in tilepy.

The kernels mirror the tutorials: vector add (n = 2^20, BLOCK 1024), fused row softmax
(4096 x 1024, one row per program) and matmul (512^3 fp32, blocks 64/64/32). Triton's
interpreter (TRITON_INTERPRET=1) was measured on this kind of machine at 0.55 s, 6.5 s and
1.3 s; the goal is 20x faster. numpy's time for the same math is shown for scale.

Run: python bench/interp_vs_triton.py  (medians of 5 rounds; interleaved with numpy).
"""

import statistics
import time

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.kernels import gemm

TRITON_S = {"vector add": 0.55, "softmax": 6.5, "matmul": 1.3}


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


def _median(fn, rounds=5):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    rng = np.random.default_rng(0)
    n = 1 << 20
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    s = rng.standard_normal((4096, 1024), np.float32)
    a, b = rng.standard_normal((512, 512), np.float32), rng.standard_normal((512, 512),
                                                                            np.float32)
    mm = gemm(64, 64, 32, "float32", "float32")
    runs = {
        "vector add": (lambda: vector_add()(x, y), lambda: x + y),
        "softmax": (lambda: softmax_rows()(s),
                    lambda: np.exp(s - s.max(1, keepdims=True)) /
                    np.exp(s - s.max(1, keepdims=True)).sum(1, keepdims=True)),
        "matmul": (lambda: mm(a, b), lambda: a @ b),
    }
    print(f"{'kernel':12} {'tilepy interp':>14} {'Triton interp':>14} {'speedup':>8} "
          f"{'goal':>6} {'numpy':>9}")
    with tilepy.backend("interp"):
        for name, (ours, ref) in runs.items():
            ours()  # build the IR once
            t = _median(ours)
            t_np = _median(ref)
            speedup = TRITON_S[name] / t
            print(f"{name:12} {t * 1e3:11.1f} ms {TRITON_S[name] * 1e3:11.0f} ms "
                  f"{speedup:7.1f}x {'met' if speedup >= 20 else 'MISSED':>6} "
                  f"{t_np * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
