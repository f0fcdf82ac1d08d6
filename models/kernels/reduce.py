"""The backward of a row max: dX[i, j] = g[i] / count_i where X[i, j] equals the row's max
m[i] (count_i elements do), else 0, so ties share the gradient equally (torch.amax's rule).
Rows stream in chunks of block_N: one pass counts, a second writes. And `mid_sum`: a sum
over the middle axis of (B, M, N) read in place (a mean over tokens), the bits of the
library row_reduce on the axis moved last, without the copy that moves it.
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


@tilepy.jit
def mid_sum(block_N=64, dtype="float32", out_dtype="float32"):
    """out[b, j] = 0 + X[b, 0, j] + X[b, 1, j] + ... (i ascending, in out_dtype): the
    library row_reduce's sum of the rows of X moved to (B, N, M) (it starts from 0 and
    adds each row's elements in order; its padding adds +0, which changes no such sum)."""
    B, M, N = T.symbolic("B"), T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def mid_sum(X: T.Tensor((B, M, N), dtype), out: T.Tensor((B, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), B, threads=128) as (bx, by):
            r = T.alloc_fragment((block_N,), out_dtype)
            T.clear(r)
            for i in T.serial(M):
                for j in T.Parallel(block_N):
                    r[j] = r[j] + T.cast(X[by, i, bx * block_N + j], out_dtype)
            for j in T.Parallel(block_N):
                out[by, bx * block_N + j] = r[j]

    return mid_sum
