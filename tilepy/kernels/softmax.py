"""Row softmax: one pass over a row that fits a tile (N <= block_N: max, exp, sum and division
on the tile in place), else the online form (a running max and rescaled sum over chunks of
block_N, then a second pass recomputing each exp). For rows that fit both give the same
bits: the online sum starts as 0 * exp(-inf - max) = +0, as the one-pass sum does. Columns
past N are masked to -inf before the max and the sum. Every element of Y is written (each
block its rows, every chunk of columns), so the output is allocated without a zero fill
(`empty_outputs`: a serial pass over it before the kernel).
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1], empty_outputs=True)  # every element of Y is written
def softmax(block_M=8, block_N=1024, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")
    acc = "float32"

    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), acc)
            row_max = T.alloc_fragment((block_M,), acc)
            prev_max = T.alloc_fragment((block_M,), acc)
            row_sum = T.alloc_fragment((block_M,), acc)
            if N <= block_N:  # the whole row is one tile
                T.copy(X[bx * block_M, 0], x)
                for i, j in T.Parallel(block_M, block_N):
                    if j >= N:
                        x[i, j] = -T.infinity(acc)
                T.reduce_max(x, row_max, dim=1)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp(x[i, j] - row_max[i])
                T.reduce_sum(x, row_sum, dim=1)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] / row_sum[i]
                T.copy(x, Y[bx * block_M, 0])
            else:
                T.fill(row_max, -T.infinity(acc))
                T.clear(row_sum)
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx * block_M, k * block_N], x)
                    for i, j in T.Parallel(block_M, block_N):
                        if k * block_N + j >= N:
                            x[i, j] = -T.infinity(acc)
                    T.copy(row_max, prev_max)
                    T.reduce_max(x, row_max, dim=1, clear=False)
                    for i in T.Parallel(block_M):
                        row_sum[i] = row_sum[i] * T.exp(prev_max[i] - row_max[i])
                    for i, j in T.Parallel(block_M, block_N):
                        x[i, j] = T.exp(x[i, j] - row_max[i])
                    T.reduce_sum(x, row_sum, dim=1, clear=False)
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx * block_M, k * block_N], x)
                    for i, j in T.Parallel(block_M, block_N):
                        x[i, j] = T.exp(x[i, j] - row_max[i]) / row_sum[i]
                    T.copy(x, Y[bx * block_M, k * block_N])

    return softmax
