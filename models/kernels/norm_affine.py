"""LayerNorm and RMSNorm with their affine map in the normalisation's own launches.
`norm_affine_fwd` writes Y = xhat * w (+ b), Xhat and Rstd; `norm_affine_bwd` takes the
output's gradient g and gives dx = row_norm_bwd(xhat, rstd, g * w); `col_sums` gives the
weight's and bias's gradients, sum_i g * xhat and sum_i g, i ascending. Per element the
operations and their order are those of row_norm_fwd / row_norm_bwd and the elementwise
ops they replace (xhat rounded, then * w rounded, then + b rounded), so the same bits.
Cfg = [eps, center] as for the row kernels; built with bias=False (RMSNorm) the forward
does not read B.
"""

import tilepy
import tilepy.language as T
from tilepy.models.kernels.norms import norm_bwd_rows, norm_stats


@tilepy.jit
def norm_affine_fwd(block_M=4, block_N=256, bias=True, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def norm_affine_fwd(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                        B: T.Tensor((N,), dtype), Cfg: T.Tensor((2,), dtype),
                        Y: T.Tensor((M, N), dtype), Xhat: T.Tensor((M, N), dtype),
                        Rstd: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            eps, center = Cfg[0], Cfg[1]
            x = T.alloc_fragment((block_M, block_N), dtype)
            w = T.alloc_fragment((block_N,), dtype)
            b = T.alloc_fragment((block_N,), dtype)
            total = T.alloc_fragment((block_M,), dtype)
            mean = T.alloc_fragment((block_M,), dtype)
            rstd = T.alloc_fragment((block_M,), dtype)
            norm_stats(X, x, total, mean, rstd, bx, eps, center, N, block_M, block_N, dtype)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], x)
                T.copy(W[k * block_N], w)
                if bias:
                    T.copy(B[k * block_N], b)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = (x[i, j] - mean[i]) * rstd[i]
                T.copy(x, Xhat[bx * block_M, k * block_N])
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = affine(x[i, j], w[j], b[j], bias)
                T.copy(x, Y[bx * block_M, k * block_N])
            T.copy(rstd, Rstd[bx * block_M])

    return norm_affine_fwd


@T.macro
def affine(v, w, b, bias):
    """v * w, then + b when `bias` (each rounded)."""
    if bias:
        return v * w + b
    return v * w


@tilepy.jit
def norm_affine_bwd(block_M=4, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def norm_affine_bwd(Xhat: T.Tensor((M, N), dtype), Rstd: T.Tensor((M,), dtype),
                        G: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                        Cfg: T.Tensor((2,), dtype), dX: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            norm_bwd_rows(Xhat, Rstd, G, W, Cfg, dX, bx, N, block_M, block_N, dtype)

    return norm_affine_bwd


@tilepy.jit
def col_sums(block_M=16, block_N=64, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def col_sums(G: T.Tensor((M, N), dtype), Xhat: T.Tensor((M, N), dtype),
                 dW: T.Tensor((N,), dtype), dB: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            g = T.alloc_fragment((block_M, block_N), dtype)
            xh = T.alloc_fragment((block_M, block_N), dtype)
            sw = T.alloc_fragment((block_N,), dtype)
            sb = T.alloc_fragment((block_N,), dtype)
            T.clear(sw)
            T.clear(sb)
            # rows past M load as 0; adding +0 changes no sum (one that starts at +0 is
            # never -0), so the sums are those of the M rows, i ascending
            for k in T.serial(T.ceildiv(M, block_M)):
                T.copy(G[k * block_M, bx * block_N], g)
                T.copy(Xhat[k * block_M, bx * block_N], xh)
                T.reduce_sum(g, sb, dim=0, clear=False)
                for i, j in T.Parallel(block_M, block_N):
                    xh[i, j] = g[i, j] * xh[i, j]
                T.reduce_sum(xh, sw, dim=0, clear=False)
            T.copy(sw, dW[bx * block_N])
            T.copy(sb, dB[bx * block_N])

    return col_sums
