"""LayerNorm and RMSNorm over the last axis: fp32 statistics, any storage dtype, one program
per block of rows streamed in chunks of block_N (columns past N masked out). LayerNorm takes
the mean, then the centred second moment (two passes: no E[x^2] - E[x]^2 cancellation); a
row that fits one tile is read once, with the same sums in the same order as chunked.
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def layernorm(block_M=8, block_N=1024, dtype="float32", eps=1e-5):
    M, N = T.symbolic("M"), T.symbolic("N")
    acc = "float32"

    @T.prim_func
    def layernorm(X: T.Tensor((M, N), dtype), gamma: T.Tensor((N,), dtype),
                  beta: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), acc)
            sq = T.alloc_fragment((block_M, block_N), acc)
            g = T.alloc_fragment((block_N,), acc)
            b = T.alloc_fragment((block_N,), acc)
            total = T.alloc_fragment((block_M,), acc)
            mean = T.alloc_fragment((block_M,), acc)
            rstd = T.alloc_fragment((block_M,), acc)
            T.clear(total)
            if N <= block_N:  # the whole row is one tile: X is read once
                T.copy(X[bx * block_M, 0], x)
                T.reduce_sum(x, total, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    mean[i] = total[i] / T.cast(N, acc)
                T.clear(total)
                for i, j in T.Parallel(block_M, block_N):
                    d = x[i, j] - mean[i]
                    sq[i, j] = T.if_then_else(j < N, d * d, 0.0)
                T.reduce_sum(sq, total, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rstd[i] = T.rsqrt(total[i] / T.cast(N, acc) + eps)
                T.copy(gamma[0], g)
                T.copy(beta[0], b)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = (x[i, j] - mean[i]) * rstd[i] * g[j] + b[j]
                T.copy(x, Y[bx * block_M, 0])
            else:  # the same sums, chunk by chunk, X read three times
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx * block_M, k * block_N], x)
                    T.reduce_sum(x, total, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    mean[i] = total[i] / T.cast(N, acc)
                T.clear(total)
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx * block_M, k * block_N], x)
                    for i, j in T.Parallel(block_M, block_N):
                        d = x[i, j] - mean[i]
                        x[i, j] = T.if_then_else(k * block_N + j < N, d * d, 0.0)
                    T.reduce_sum(x, total, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rstd[i] = T.rsqrt(total[i] / T.cast(N, acc) + eps)
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx * block_M, k * block_N], x)
                    T.copy(gamma[k * block_N], g)
                    T.copy(beta[k * block_N], b)
                    for i, j in T.Parallel(block_M, block_N):
                        x[i, j] = (x[i, j] - mean[i]) * rstd[i] * g[j] + b[j]
                    T.copy(x, Y[bx * block_M, k * block_N])

    return layernorm


@tilepy.jit(out_idx=[-1])
def rmsnorm(block_M=4, block_N=256, dtype="float32", eps=1e-6):
    M, N = T.symbolic("M"), T.symbolic("N")
    acc = "float32"

    @T.prim_func
    def rmsnorm(X: T.Tensor((M, N), dtype), weight: T.Tensor((N,), dtype),
                Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), acc)
            w = T.alloc_fragment((block_N,), acc)
            sq = T.alloc_fragment((block_M,), acc)
            rstd = T.alloc_fragment((block_M,), acc)
            T.clear(sq)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(x, sq, dim=1, clear=False)
            for i in T.Parallel(block_M):
                rstd[i] = T.rsqrt(sq[i] / T.cast(N, acc) + eps)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                T.copy(weight[k * block_N], w)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] * rstd[i] * w[j]
                T.copy(x, Y[bx * block_M, k * block_N])

    return rmsnorm
