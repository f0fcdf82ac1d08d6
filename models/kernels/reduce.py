"""The backward of a row max: dX[i, j] = g[i] / count_i where X[i, j] equals the row's max
m[i] (count_i elements do), else 0, so ties share the gradient equally (torch.amax's rule).
Rows stream in chunks of block_N: one pass counts, a second writes.
"""

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.models.kernels.launch import launch


@tilepy.jit
def row_max_bwd(block_M=8, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def row_max_bwd(X: T.Tensor((M, N), dtype), m: T.Tensor((M,), dtype),
                    g: T.Tensor((M,), dtype), dX: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), dtype)
            mx = T.alloc_fragment((block_M,), dtype)
            gg = T.alloc_fragment((block_M,), dtype)
            count = T.alloc_fragment((block_M,), dtype)
            T.copy(m[bx * block_M], mx)
            T.copy(g[bx * block_M], gg)
            T.clear(count)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.if_then_else(k * block_N + j < N and x[i, j] == mx[i], 1.0, 0.0)
                T.reduce_sum(x, count, dim=1, clear=False)
            for i in T.Parallel(block_M):
                gg[i] = gg[i] / T.max(count[i], 1.0)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.if_then_else(x[i, j] == mx[i], gg[i], 0.0)
                T.copy(x, dX[bx * block_M, k * block_N])

    return row_max_bwd


def max_bwd(x: np.ndarray, m: np.ndarray, g: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, x.dtype)
    launch(row_max_bwd(dtype=x.dtype.name), x, m, g, out)
    return out
