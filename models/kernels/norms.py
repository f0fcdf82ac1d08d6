"""Row normalisation forward and backward, the arithmetic of LayerNorm, RMSNorm and
BatchNorm (whose channels the op first moves to rows). Cfg = [eps, center] at run time:
center 1 subtracts the row mean (LayerNorm, BatchNorm), 0 does not (RMSNorm), so one
compile serves all three. The affine weight and bias are applied by the elementwise ops.

forward   mean = center * sum(x)/N, var = sum((x-mean)^2)/N, rstd = 1/sqrt(var + eps),
          xhat = (x - mean) * rstd        (outputs Xhat, Mean, Var, Rstd per row)
backward  dx = rstd * (g - center * mean(g) - xhat * mean(g * xhat))
Rows stream in chunks of block_N, sums j ascending, in float32 for float32 data.
"""

import tilepy
import tilepy.language as T


def tiles(n: int, fast: bool) -> dict:
    """Build arguments for rows of `n` elements: rows of at most 64 take 64-wide tiles
    (the default 256-wide tile would be three quarters zeros) with more rows per block,
    as many as measured best per mode. One tile covers the row either way and the
    tile's padding adds zeros after the row's own elements, so the bits are the same."""
    return {"block_M": 32 if fast else 16, "block_N": 64} if n <= 64 else {}


@T.macro
def norm_stats(X, x, total, mean, rstd, bx, eps, center, N, block_M, block_N, dtype):
    """The row statistics of block bx: mean (times center), then total = the variance
    about it and rstd = 1 / sqrt(var + eps); x is the tile buffer the rows stream through."""
    T.clear(total)
    for k in T.serial(T.ceildiv(N, block_N)):
        T.copy(X[bx * block_M, k * block_N], x)
        T.reduce_sum(x, total, dim=1, clear=False)
    for i in T.Parallel(block_M):
        mean[i] = center * (total[i] / T.cast(N, dtype))
    T.clear(total)
    for k in T.serial(T.ceildiv(N, block_N)):
        T.copy(X[bx * block_M, k * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            d = x[i, j] - mean[i]
            x[i, j] = T.if_then_else(k * block_N + j < N, d * d, 0.0)
        T.reduce_sum(x, total, dim=1, clear=False)
    for i in T.Parallel(block_M):
        total[i] = total[i] / T.cast(N, dtype)
        rstd[i] = 1.0 / T.sqrt(total[i] + eps)


@tilepy.jit
def row_norm_fwd(block_M=4, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def row_norm_fwd(X: T.Tensor((M, N), dtype), Cfg: T.Tensor((2,), dtype),
                     Xhat: T.Tensor((M, N), dtype), Mean: T.Tensor((M,), dtype),
                     Var: T.Tensor((M,), dtype), Rstd: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            eps, center = Cfg[0], Cfg[1]
            x = T.alloc_fragment((block_M, block_N), dtype)
            total = T.alloc_fragment((block_M,), dtype)
            mean = T.alloc_fragment((block_M,), dtype)
            rstd = T.alloc_fragment((block_M,), dtype)
            norm_stats(X, x, total, mean, rstd, bx, eps, center, N, block_M, block_N, dtype)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = (x[i, j] - mean[i]) * rstd[i]
                T.copy(x, Xhat[bx * block_M, k * block_N])
            T.copy(mean, Mean[bx * block_M])
            T.copy(total, Var[bx * block_M])
            T.copy(rstd, Rstd[bx * block_M])

    return row_norm_fwd


@T.macro
def norm_bwd_rows(Xhat, Rstd, G, W, Cfg, dX, bx, N, block_M, block_N, dtype):
    """dX of block bx's rows from the normalised rows, rstd and the gradient g of xhat;
    with a weight W (not None) the gradient of xhat * W is given, and g = G * W."""
    center = Cfg[1]
    g = T.alloc_fragment((block_M, block_N), dtype)
    xh = T.alloc_fragment((block_M, block_N), dtype)
    sum_g = T.alloc_fragment((block_M,), dtype)
    sum_gx = T.alloc_fragment((block_M,), dtype)
    rstd = T.alloc_fragment((block_M,), dtype)
    T.clear(sum_g)
    T.clear(sum_gx)
    T.copy(Rstd[bx * block_M], rstd)
    for k in T.serial(T.ceildiv(N, block_N)):
        T.copy(G[bx * block_M, k * block_N], g)
        weigh(W, g, k, block_M, block_N, dtype)
        T.copy(Xhat[bx * block_M, k * block_N], xh)
        T.reduce_sum(g, sum_g, dim=1, clear=False)
        for i, j in T.Parallel(block_M, block_N):
            xh[i, j] = g[i, j] * xh[i, j]
        T.reduce_sum(xh, sum_gx, dim=1, clear=False)
    for i in T.Parallel(block_M):
        sum_g[i] = center * (sum_g[i] / T.cast(N, dtype))
        sum_gx[i] = sum_gx[i] / T.cast(N, dtype)
    for k in T.serial(T.ceildiv(N, block_N)):
        T.copy(G[bx * block_M, k * block_N], g)
        weigh(W, g, k, block_M, block_N, dtype)
        T.copy(Xhat[bx * block_M, k * block_N], xh)
        for i, j in T.Parallel(block_M, block_N):
            g[i, j] = rstd[i] * (g[i, j] - sum_g[i] - xh[i, j] * sum_gx[i])
        T.copy(g, dX[bx * block_M, k * block_N])


@T.macro
def weigh(W, g, k, block_M, block_N, dtype):
    """g = g * W over chunk k's columns (nothing when W is None)."""
    if W is not None:
        w = T.alloc_fragment((block_N,), dtype)
        T.copy(W[k * block_N], w)
        for i, j in T.Parallel(block_M, block_N):
            g[i, j] = g[i, j] * w[j]


@tilepy.jit
def row_norm_bwd(block_M=4, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def row_norm_bwd(Xhat: T.Tensor((M, N), dtype), Rstd: T.Tensor((M,), dtype),
                     G: T.Tensor((M, N), dtype), Cfg: T.Tensor((2,), dtype),
                     dX: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            norm_bwd_rows(Xhat, Rstd, G, None, Cfg, dX, bx, N, block_M, block_N, dtype)

    return row_norm_bwd
