"""Elementwise kernels: vector add (Triton's first tutorial) and a broadcast bias + GELU.

`bias_gelu` adds a per-column bias row to every row of X (broadcasting along M) and applies
the tanh-approximated GELU, computing in float32 whatever the storage dtype.
"""

import math

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def vector_add(block=1024, dtype="float32"):
    n = T.symbolic("n")

    @T.prim_func
    def vector_add(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
                   Z: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), dtype)
            y = T.alloc_fragment((block,), dtype)
            T.copy(X[bx * block], x)
            T.copy(Y[bx * block], y)
            for i in T.Parallel(block):
                x[i] = x[i] + y[i]
            T.copy(x, Z[bx * block])

    return vector_add


@tilepy.jit(out_idx=[-1])
def bias_gelu(block_M=32, block_N=128, dtype="bfloat16"):
    M, N = T.symbolic("M"), T.symbolic("N")
    c = math.sqrt(2.0 / math.pi)

    @T.prim_func
    def bias_gelu(X: T.Tensor((M, N), dtype), bias: T.Tensor((N,), dtype),
                  Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), "float32")
            b = T.alloc_fragment((block_N,), "float32")
            T.copy(X[by * block_M, bx * block_N], x)
            T.copy(bias[bx * block_N], b)
            for i, j in T.Parallel(block_M, block_N):
                v = x[i, j] + b[j]
                x[i, j] = 0.5 * v * (1.0 + T.tanh(c * (v + 0.044715 * v * v * v)))
            T.copy(x, Y[by * block_M, bx * block_N])

    return bias_gelu
