"""The kernels of attention by composition: a batched gemm (C[b] = A[b] @ B[b], k
ascending, one block per output tile and batch), the row softmax in the data's own dtype
(the library kernel, tilepy/kernels/softmax.py, computes in float32 whatever the dtype:
float64 finite differences need float64) and its backward (dX = Y * (G - sum_j G * Y)).
Sizes are symbolic: one compile per dtype.
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def bmm(block_M=32, block_N=32, block_K=32, dtype="float32"):
    Bt, M, N, K = T.symbolic("B"), T.symbolic("M"), T.symbolic("N"), T.symbolic("K")

    @T.prim_func
    def bmm(A: T.Tensor((Bt, M, K), dtype), Bm: T.Tensor((Bt, K, N), dtype),
            C: T.Tensor((Bt, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), Bt,
                      threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bz, by * block_M, k * block_K], A_s)
                T.copy(Bm[bz, k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[bz, by * block_M, bx * block_N])

    return bmm


@tilepy.jit
def softmax_bwd(block_M=8, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def softmax_bwd(Y: T.Tensor((M, N), dtype), G: T.Tensor((M, N), dtype),
                    dX: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            y = T.alloc_fragment((block_M, block_N), dtype)
            g = T.alloc_fragment((block_M, block_N), dtype)
            dot = T.alloc_fragment((block_M,), dtype)
            T.clear(dot)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(Y[bx * block_M, k * block_N], y)
                T.copy(G[bx * block_M, k * block_N], g)
                for i, j in T.Parallel(block_M, block_N):
                    y[i, j] = y[i, j] * g[i, j]
                T.reduce_sum(y, dot, dim=1, clear=False)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(Y[bx * block_M, k * block_N], y)
                T.copy(G[bx * block_M, k * block_N], g)
                for i, j in T.Parallel(block_M, block_N):
                    y[i, j] = y[i, j] * (g[i, j] - dot[i])
                T.copy(y, dX[bx * block_M, k * block_N])

    return softmax_bwd


@tilepy.jit
def softmax_fwd(block_M=8, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def softmax_fwd(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), dtype)
            row_max = T.alloc_fragment((block_M,), dtype)
            row_sum = T.alloc_fragment((block_M,), dtype)
            T.fill(row_max, -T.infinity(dtype))
            T.clear(row_sum)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    if k * block_N + j >= N:
                        x[i, j] = -T.infinity(dtype)
                T.reduce_max(x, row_max, dim=1, clear=False)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.if_then_else(k * block_N + j < N, T.exp(x[i, j] - row_max[i]),
                                             0.0)
                T.reduce_sum(x, row_sum, dim=1, clear=False)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp(x[i, j] - row_max[i]) / row_sum[i]
                T.copy(x, Y[bx * block_M, k * block_N])

    return softmax_fwd
