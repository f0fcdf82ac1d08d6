"""The convolution kernels the models use: the library's NCHW forward, input gradient and
weight gradient (tilepy/kernels/conv_nchw.py, S = [stride, pad, dilation]), and
`conv2d_padded`, the forward without groups on an input padded beforehand.

`conv2d_padded` computes conv2d_fwd's sums in its order (per output, (c, kh, kw)
ascending from +0, then the bias), so in exact mode it gives conv2d_fwd's bits; what
differs is the data movement, shaped for small channel counts:
- the gemm runs transposed, Y^T = W (F x C*KH*KW) @ patches (C*KH*KW x output pixels):
  filters are the tile's rows (a few), output pixels its columns. The gathered patch
  tile is most of the time, and each row block gathers it again, so the models take
  8-row tiles for up to 8 filters and 16-row tiles above (`block_rows`);
- the input arrives padded (zeros around it), so a patch element is one load at
  (pixel offset + tap offset), with no test of the image's edges: each block splits its
  pixels' indices once and each k-step its taps' once. The one test left bounds that
  index by the array (so the JIT's versioning pass runs the loads unchecked) and gives
  a tap past C*KH*KW its +0, as conv2d_fwd: +0 products leave the sums as they are.
  Pixel and tap indices are split without integer divisions (pool.py's `_div`), which
  cost as much as the gemm here;
- a block runs `block_T` column tiles one after another, so the per-block set-up (its
  arrays) is paid once for several small tiles;
- S = [stride, dilation, relu, row_sums]: relu = 1 applies ReLU to each output as it is
  stored (relu_mask's values: v where v > 0, else +0), a Conv2d + ReLU without the ReLU
  launch; row_sums = 1 also writes Rsum[f] = the sum of Wt[f] (C*KH*KW ascending from +0,
  row_reduce's order): in the weight gradient, where Wt is dY, the bias gradient.
"""

import tilepy
import tilepy.language as T
from tilepy.kernels.conv_nchw import conv2d_dgrad, conv2d_fwd, conv2d_wgrad
from tilepy.models.kernels.pool import _div, _inverse


@tilepy.jit
def conv2d_padded(block_M=8, block_N=32, block_K=32, block_T=4, dtype="float32"):
    N, C, Hp, Wp = T.symbolic("N"), T.symbolic("C"), T.symbolic("Hp"), T.symbolic("Wp")
    F, KH, KW = T.symbolic("F"), T.symbolic("KH"), T.symbolic("KW")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def conv2d_padded(Xp: T.Tensor((N, C, Hp, Wp), dtype), Wt: T.Tensor((F, C, KH, KW), dtype),
                      Bias: T.Tensor((F,), dtype), S: T.Tensor((4,), "int32"),
                      Y: T.Tensor((N, F, OH, OW), dtype), Rsum: T.Tensor((F,), dtype)):
        rows, depth, plane, size = N * OH * OW, C * KH * KW, OH * OW, N * C * Hp * Wp
        tiles = T.ceildiv(rows, block_N)
        with T.Kernel(T.ceildiv(tiles, block_T), T.ceildiv(F, block_M), threads=128) as (bx, by):
            stride, dil, relu, row_sums = S[0], S[1], S[2], S[3]
            Xf = T.Tensor((size,), dtype, Xp.data)
            Wf = T.Tensor((F, depth), dtype, Wt.data)
            Yf = T.Tensor((N * F * plane,), dtype, Y.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            r_at = T.alloc_fragment((block_N,), "int32")  # offset of Xp[n, 0, oh*s, ow*s]
            r_out = T.alloc_fragment((block_N,), "int32")  # offset of Y[n, 0, oh, ow]
            c_at = T.alloc_fragment((block_K,), "int32")  # offset of tap (c, kh, kw)
            inv_plane, inv_ow, inv_taps, inv_kw = (_inverse(plane), _inverse(OW),
                                                   _inverse(KH * KW), _inverse(KW))
            if row_sums != 0 and bx == 0:  # each filter's sum, d ascending from +0
                rs = T.alloc_fragment((block_M,), dtype)
                T.clear(rs)
                for d in T.serial(depth):
                    for i in T.Parallel(block_M):
                        rs[i] = rs[i] + Wf[T.min(by * block_M + i, F - 1), d]
                for i in T.Parallel(block_M):
                    if by * block_M + i < F:
                        Rsum[by * block_M + i] = rs[i]
            # block_T column tiles one after another (the block's arrays made once)
            for tb in T.serial(T.min(block_T, tiles - bx * block_T)):
                col = (bx * block_T + tb) * block_N
                for j in T.Parallel(block_N):
                    r = T.min(col + j, rows - 1)  # (columns past the end: not stored)
                    n = _div(r, plane, inv_plane)
                    q = r - n * plane
                    oh = _div(q, OW, inv_ow)
                    r_at[j] = (n * C * Hp + oh * stride) * Wp + (q - oh * OW) * stride
                    r_out[j] = n * F * plane + q
                T.clear(acc)
                for k in T.serial(T.ceildiv(depth, block_K)):
                    for i in T.Parallel(block_K):
                        d = k * block_K + i
                        c = _div(d, KH * KW, inv_taps)
                        t = d - c * (KH * KW)
                        kh = _div(t, KW, inv_kw)
                        tap = (c * Hp + kh * dil) * Wp + (t - kh * KW) * dil
                        c_at[i] = T.if_then_else(d < depth, tap, -size)
                    T.copy(Wf[by * block_M, k * block_K], A_s)
                    for i, j in T.Parallel(block_K, block_N):
                        at = c_at[i] + r_at[j]
                        if at >= 0 and at < size:  # (bounds the gather: unchecked loads)
                            B_s[i, j] = Xf[at]
                        else:
                            B_s[i, j] = 0.0
                    T.gemm(A_s, B_s, acc)
                for i, j in T.Parallel(block_M, block_N):
                    f = by * block_M + i
                    if f < F and col + j < rows:
                        v = acc[i, j] + Bias[f]
                        if relu != 0:  # ReLU as the binary kernel's relu_mask: v if v > 0
                            Yf[r_out[j] + f * plane] = T.if_then_else(v > 0.0, v, 0.0)
                        else:
                            Yf[r_out[j] + f * plane] = v

    return conv2d_padded


def block_rows(filters: int) -> int:
    """conv2d_padded's tile rows for `filters` output channels (one of two compiles)."""
    return 8 if filters <= 8 else 16


__all__ = ["block_rows", "conv2d_dgrad", "conv2d_fwd", "conv2d_padded", "conv2d_wgrad"]
