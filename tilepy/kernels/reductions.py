"""Row reductions: out[i] = reduce_j X[i, j] for sum, max, min, abssum and absmax.

Rows are streamed in chunks of block_N; each chunk is combined into the running result
(`clear=False`), so the order is j ascending. Columns past N are replaced by the
reduction's identity before they are combined.
"""

import math

import tilepy
import tilepy.language as T

_IDENTITY = {"sum": 0.0, "abssum": 0.0, "absmax": 0.0, "max": -math.inf, "min": math.inf}


@tilepy.jit(out_idx=[-1])
def row_reduce(kind="sum", block_M=8, block_N=256, dtype="float32", out_dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")
    identity = _IDENTITY[kind]
    reduce = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min,
              "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}[kind]

    @T.prim_func
    def row_reduce(X: T.Tensor((M, N), dtype), out: T.Tensor((M,), out_dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), out_dtype)
            r = T.alloc_fragment((block_M,), out_dtype)
            T.fill(r, identity)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    if k * block_N + j >= N:
                        x[i, j] = identity
                reduce(x, r, dim=1, clear=False)
            T.copy(r, out[bx * block_M])

    return row_reduce
