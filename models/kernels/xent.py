"""Softmax cross-entropy, forward and backward fused: for logits X (M, C) and int32 labels,
Loss[0] = mean_i (logsumexp(X[i]) - X[i, label_i]) and dX = (softmax(X) - onehot) / M, the
gradient of that mean. One block walks the rows in chunks of block_M, so the loss sums rows
in ascending order; classes fit one tile (C <= block_C, columns past C masked to -inf).
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def softmax_xent(block_M=8, block_C=16, dtype="float32"):
    M, C = T.symbolic("M"), T.symbolic("C")

    @T.prim_func
    def softmax_xent(X: T.Tensor((M, C), dtype), Labels: T.Tensor((M,), "int32"),
                     Loss: T.Tensor((1,), dtype), dX: T.Tensor((M, C), dtype)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((block_M, block_C), dtype)
            row_max = T.alloc_fragment((block_M,), dtype)
            row_sum = T.alloc_fragment((block_M,), dtype)
            lab = T.alloc_fragment((block_M,), "int32")
            row_loss = T.alloc_fragment((block_M,), dtype)
            total = T.alloc_fragment((1,), dtype)
            T.clear(total)
            for k in T.serial(T.ceildiv(M, block_M)):
                T.copy(X[k * block_M, bx * block_C], x)
                T.copy(Labels[k * block_M], lab)
                for i, j in T.Parallel(block_M, block_C):
                    if j >= C:
                        x[i, j] = -T.infinity(dtype)
                T.reduce_max(x, row_max, dim=1)
                for i in T.Parallel(block_M):
                    row = k * block_M + i
                    row_loss[i] = T.if_then_else(row < M, row_max[i] - X[row, lab[i]], 0.0)
                for i, j in T.Parallel(block_M, block_C):
                    x[i, j] = T.exp(x[i, j] - row_max[i])
                T.reduce_sum(x, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    row_loss[i] = T.if_then_else(k * block_M + i < M,
                                                 row_loss[i] + T.log(row_sum[i]), 0.0)
                for i in T.serial(block_M):
                    total[0] = total[0] + row_loss[i]
                for i, j in T.Parallel(block_M, block_C):
                    hot = T.if_then_else(j == lab[i], 1.0, 0.0)
                    x[i, j] = (x[i, j] / row_sum[i] - hot) / T.cast(M, dtype)
                T.copy(x, dX[k * block_M, bx * block_C])
            Loss[0] = total[0] / T.cast(M, dtype)

    return softmax_xent
