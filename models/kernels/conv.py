"""2-d convolution in PyTorch's layouts (X: N, C, H, W; weight: F, C/groups, KH, KW),
forward, input gradient and weight gradient, each an implicit-im2col gemm whose A and B
tiles are gathered from the arrays (zero outside the image or past the end). Every size is
symbolic and stride and padding are run-time values (S = [stride, pad]), so each of the
three kernels compiles once per dtype. The grid's third axis is the group.

forward  Y[n, f, oh, ow]  = B[f] + sum_(c, kh, kw) X[n, c, oh*s+kh-p, ow*s+kw-p] W[f, c, kh, kw]
dgrad    dX[n, c, ih, iw] = sum_(f, kh, kw) dY[n, f, oh, ow] W[f, c, kh, kw], ih = oh*s+kh-p
wgrad    dW[f, c, kh, kw] = sum_(n, oh, ow) dY[n, f, oh, ow] X[n, c, oh*s+kh-p, ow*s+kw-p]
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def conv2d_fwd(block_M=64, block_N=16, block_K=32, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    F, Cg, KH, KW = T.symbolic("F"), T.symbolic("Cg"), T.symbolic("KH"), T.symbolic("KW")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def conv2d_fwd(X: T.Tensor((N, C, H, W), dtype), Wt: T.Tensor((F, Cg, KH, KW), dtype),
                   Bias: T.Tensor((F,), dtype), S: T.Tensor((2,), "int32"),
                   Y: T.Tensor((N, F, OH, OW), dtype)):
        groups = C // Cg
        Fg = F // groups
        rows, depth = N * OH * OW, Cg * KH * KW
        with T.Kernel(T.ceildiv(Fg, block_N), T.ceildiv(rows, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad = S[0], S[1]
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(acc)
            for k in T.serial(T.ceildiv(depth, block_K)):
                for i, j in T.Parallel(block_M, block_K):
                    r, d = by * block_M + i, k * block_K + j
                    n, oh, ow = r // (OH * OW), r % (OH * OW) // OW, r % OW
                    c, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    ih, iw = oh * stride + kh - pad, ow * stride + kw - pad
                    ok = r < rows and d < depth and ih >= 0 and ih < H and iw >= 0 and iw < W
                    A_s[i, j] = T.if_then_else(ok, X[n, gz * Cg + c, ih, iw], 0.0)
                for i, j in T.Parallel(block_K, block_N):
                    d, f = k * block_K + i, bx * block_N + j
                    c, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    B_s[i, j] = T.if_then_else(d < depth and f < Fg,
                                               Wt[gz * Fg + f, c, kh, kw], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                r, f = by * block_M + i, bx * block_N + j
                if r < rows and f < Fg:
                    fo = gz * Fg + f
                    Y[r // (OH * OW), fo, r % (OH * OW) // OW, r % OW] = acc[i, j] + Bias[fo]

    return conv2d_fwd


@tilepy.jit
def conv2d_dgrad(block_M=64, block_N=16, block_K=32, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    F, Cg, KH, KW = T.symbolic("F"), T.symbolic("Cg"), T.symbolic("KH"), T.symbolic("KW")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def conv2d_dgrad(dY: T.Tensor((N, F, OH, OW), dtype), Wt: T.Tensor((F, Cg, KH, KW), dtype),
                     S: T.Tensor((2,), "int32"), dX: T.Tensor((N, C, H, W), dtype)):
        groups = C // Cg
        Fg = F // groups
        rows, depth = N * H * W, Fg * KH * KW
        with T.Kernel(T.ceildiv(Cg, block_N), T.ceildiv(rows, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad = S[0], S[1]
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(acc)
            for k in T.serial(T.ceildiv(depth, block_K)):
                for i, j in T.Parallel(block_M, block_K):
                    r, d = by * block_M + i, k * block_K + j
                    n, ih, iw = r // (H * W), r % (H * W) // W, r % W
                    f, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    th, tw = ih + pad - kh, iw + pad - kw
                    oh, ow = th // stride, tw // stride
                    ok = (r < rows and d < depth and th >= 0 and tw >= 0 and th % stride == 0
                          and tw % stride == 0 and oh < OH and ow < OW)
                    A_s[i, j] = T.if_then_else(ok, dY[n, gz * Fg + f, oh, ow], 0.0)
                for i, j in T.Parallel(block_K, block_N):
                    d, c = k * block_K + i, bx * block_N + j
                    f, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    B_s[i, j] = T.if_then_else(d < depth and c < Cg,
                                               Wt[gz * Fg + f, c, kh, kw], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                r, c = by * block_M + i, bx * block_N + j
                if r < rows and c < Cg:
                    dX[r // (H * W), gz * Cg + c, r % (H * W) // W, r % W] = acc[i, j]

    return conv2d_dgrad


@tilepy.jit
def conv2d_wgrad(block_M=16, block_N=32, block_K=64, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    F, Cg, KH, KW = T.symbolic("F"), T.symbolic("Cg"), T.symbolic("KH"), T.symbolic("KW")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def conv2d_wgrad(dY: T.Tensor((N, F, OH, OW), dtype), X: T.Tensor((N, C, H, W), dtype),
                     S: T.Tensor((2,), "int32"), dW: T.Tensor((F, Cg, KH, KW), dtype)):
        groups = C // Cg
        Fg = F // groups
        depth, pixels = Cg * KH * KW, N * OH * OW
        with T.Kernel(T.ceildiv(depth, block_N), T.ceildiv(Fg, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad = S[0], S[1]
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(acc)
            for k in T.serial(T.ceildiv(pixels, block_K)):
                for i, j in T.Parallel(block_M, block_K):
                    f, q = by * block_M + i, k * block_K + j
                    n, oh, ow = q // (OH * OW), q % (OH * OW) // OW, q % OW
                    A_s[i, j] = T.if_then_else(f < Fg and q < pixels,
                                               dY[n, gz * Fg + f, oh, ow], 0.0)
                for i, j in T.Parallel(block_K, block_N):
                    q, d = k * block_K + i, bx * block_N + j
                    n, oh, ow = q // (OH * OW), q % (OH * OW) // OW, q % OW
                    c, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    ih, iw = oh * stride + kh - pad, ow * stride + kw - pad
                    ok = q < pixels and d < depth and ih >= 0 and ih < H and iw >= 0 and iw < W
                    B_s[i, j] = T.if_then_else(ok, X[n, gz * Cg + c, ih, iw], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                f, d = by * block_M + i, bx * block_N + j
                if f < Fg and d < depth:
                    dW[gz * Fg + f, d // (KH * KW), d % (KH * KW) // KW, d % KW] = acc[i, j]

    return conv2d_wgrad
