"""Row softmax with the online (running max, rescaled sum) formulation.

One program per block of rows; the row is streamed in chunks of block_N, so any N works.
Columns past N are masked to -inf before they enter the max and the sum.
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def softmax(block_M=1, block_N=1024, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")
    acc = "float32"

    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), acc)
            row_max = T.alloc_fragment((block_M,), acc)
            prev_max = T.alloc_fragment((block_M,), acc)
            row_sum = T.alloc_fragment((block_M,), acc)
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
