"""2-d convolution in PyTorch's layouts (X: N, C, H, W; weight: F, C/groups, KH, KW) with
stride, padding, dilation and groups (depthwise: groups = C): forward, input gradient and
weight gradient, each an implicit-im2col gemm whose A and B
tiles are gathered from flat views of the arrays (zero outside the image or past the end).
Each block splits its rows' and its k-slice's indices into their parts once (integer
division per row and per column, not per element), so the gather is adds and compares.
Every size is symbolic and stride, padding and dilation are run-time values
(S = [stride, pad, dilation]), so each of the three kernels compiles once per dtype. The
grid's third axis is the group. With d the dilation (c, f within the group):

forward  Y[n, f, oh, ow]  = B[f] + sum_(c,kh,kw) X[n, c, oh*s+kh*d-p, ow*s+kw*d-p] W[f, c, kh, kw]
dgrad    dX[n, c, ih, iw] = sum_(f, kh, kw) dY[n, f, oh, ow] W[f, c, kh, kw], ih = oh*s+kh*d-p
wgrad    dW[f, c, kh, kw] = sum_(n, oh, ow) dY[n, f, oh, ow] X[n, c, oh*s+kh*d-p, ow*s+kw*d-p]
The library's checks (tilepy.kernels.checks.conv_nchw_case) bound each against float64.
"""

import tilepy
import tilepy.language as T

_SIZES = "N, C, H, W, F, Cg, KH, KW, OH, OW"


def _sizes():
    return [T.symbolic(n) for n in _SIZES.split(", ")]


@tilepy.jit
def conv2d_fwd(block_M=64, block_N=16, block_K=32, dtype="float32"):
    N, C, H, W, F, Cg, KH, KW, OH, OW = _sizes()

    @T.prim_func
    def conv2d_fwd(X: T.Tensor((N, C, H, W), dtype), Wt: T.Tensor((F, Cg, KH, KW), dtype),
                   Bias: T.Tensor((F,), dtype), S: T.Tensor((3,), "int32"),
                   Y: T.Tensor((N, F, OH, OW), dtype)):
        groups = C // Cg
        Fg = F // groups
        rows, depth = N * OH * OW, Cg * KH * KW
        with T.Kernel(T.ceildiv(Fg, block_N), T.ceildiv(rows, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad, dil = S[0], S[1], S[2]
            Xf = T.Tensor((N * C * H * W,), dtype, X.data)
            Wf = T.Tensor((F * depth,), dtype, Wt.data)
            Yf = T.Tensor((N * F * OH * OW,), dtype, Y.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            r_h = T.alloc_fragment((block_M,), "int32")  # oh * stride - pad (or far off)
            r_w = T.alloc_fragment((block_M,), "int32")
            r_at = T.alloc_fragment((block_M,), "int32")  # offset of X[n, group, r_h, r_w]
            c_h = T.alloc_fragment((block_K,), "int32")  # kh (or far off past depth)
            c_w = T.alloc_fragment((block_K,), "int32")
            c_at = T.alloc_fragment((block_K,), "int32")  # offset of (c, kh, kw)
            for i in T.Parallel(block_M):
                r = by * block_M + i
                n, oh, ow = r // (OH * OW), r % (OH * OW) // OW, r % OW
                r_h[i] = T.if_then_else(r < rows, oh * stride - pad, -H - KH * dil)
                r_w[i] = ow * stride - pad
                r_at[i] = (n * C + gz * Cg) * H * W + r_h[i] * W + r_w[i]
            T.clear(acc)
            for k in T.serial(T.ceildiv(depth, block_K)):
                for j in T.Parallel(block_K):
                    d = k * block_K + j
                    c, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                    c_h[j] = T.if_then_else(d < depth, kh * dil, -H - KH * dil)
                    c_w[j] = kw * dil
                    c_at[j] = c * H * W + c_h[j] * W + c_w[j]
                for i, j in T.Parallel(block_M, block_K):
                    ih, iw = r_h[i] + c_h[j], r_w[i] + c_w[j]
                    ok = ih >= 0 and ih < H and iw >= 0 and iw < W
                    A_s[i, j] = T.if_then_else(ok, Xf[r_at[i] + c_at[j]], 0.0)
                for i, j in T.Parallel(block_K, block_N):
                    d, f = k * block_K + i, bx * block_N + j
                    B_s[i, j] = T.if_then_else(d < depth and f < Fg,
                                               Wf[(gz * Fg + f) * depth + d], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                r, f = by * block_M + i, bx * block_N + j
                if r < rows and f < Fg:
                    fo = gz * Fg + f
                    Yf[(r // (OH * OW) * F + fo) * OH * OW + r % (OH * OW)] = acc[i, j] + Bias[fo]

    return conv2d_fwd


@tilepy.jit
def conv2d_dgrad(block_M=64, block_N=16, block_K=32, dtype="float32"):
    N, C, H, W, F, Cg, KH, KW, OH, OW = _sizes()

    @T.prim_func
    def conv2d_dgrad(dY: T.Tensor((N, F, OH, OW), dtype), Wt: T.Tensor((F, Cg, KH, KW), dtype),
                     S: T.Tensor((3,), "int32"), dX: T.Tensor((N, C, H, W), dtype)):
        groups = C // Cg
        Fg = F // groups
        rows, depth = N * H * W, Fg * KH * KW
        with T.Kernel(T.ceildiv(Cg, block_N), T.ceildiv(rows, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad, dil = S[0], S[1], S[2]
            dYf = T.Tensor((N * F * OH * OW,), dtype, dY.data)
            Wf = T.Tensor((F * Cg * KH * KW,), dtype, Wt.data)
            dXf = T.Tensor((N * C * H * W,), dtype, dX.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            r_h = T.alloc_fragment((block_M,), "int32")  # ih + pad (or far off past rows)
            r_w = T.alloc_fragment((block_M,), "int32")
            r_at = T.alloc_fragment((block_M,), "int32")  # offset of dY[n, group, 0, 0]
            c_h = T.alloc_fragment((block_K,), "int32")  # kh (or far off past depth)
            c_w = T.alloc_fragment((block_K,), "int32")
            c_at = T.alloc_fragment((block_K,), "int32")  # offset of filter f's plane
            for i in T.Parallel(block_M):
                r = by * block_M + i
                r_h[i] = T.if_then_else(r < rows, r % (H * W) // W + pad, -KH * dil - 1)
                r_w[i] = r % W + pad
                r_at[i] = (r // (H * W) * F + gz * Fg) * OH * OW
            T.clear(acc)
            for k in T.serial(T.ceildiv(depth, block_K)):
                for j in T.Parallel(block_K):
                    d = k * block_K + j
                    c_h[j] = T.if_then_else(d < depth, d % (KH * KW) // KW * dil, H + pad + 1)
                    c_w[j] = d % KW * dil
                    c_at[j] = d // (KH * KW) * OH * OW
                if stride == 1:  # every tap lands on an output: no division
                    for i, j in T.Parallel(block_M, block_K):
                        oh, ow = r_h[i] - c_h[j], r_w[i] - c_w[j]
                        ok = oh >= 0 and ow >= 0 and oh < OH and ow < OW
                        A_s[i, j] = T.if_then_else(ok, dYf[r_at[i] + c_at[j] + oh * OW + ow],
                                                   0.0)
                else:
                    for i, j in T.Parallel(block_M, block_K):
                        th, tw = r_h[i] - c_h[j], r_w[i] - c_w[j]
                        oh, ow = th // stride, tw // stride
                        ok = (th >= 0 and tw >= 0 and oh * stride == th and ow * stride == tw
                              and oh < OH and ow < OW)
                        A_s[i, j] = T.if_then_else(ok, dYf[r_at[i] + c_at[j] + oh * OW + ow],
                                                   0.0)
                for i, j in T.Parallel(block_K, block_N):
                    d, c = k * block_K + i, bx * block_N + j
                    f, kk = d // (KH * KW), d % (KH * KW)
                    B_s[i, j] = T.if_then_else(d < depth and c < Cg,
                                               Wf[((gz * Fg + f) * Cg + c) * KH * KW + kk], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                r, c = by * block_M + i, bx * block_N + j
                if r < rows and c < Cg:
                    dXf[(r // (H * W) * C + gz * Cg + c) * H * W + r % (H * W)] = acc[i, j]

    return conv2d_dgrad


@tilepy.jit
def conv2d_wgrad(block_M=16, block_N=32, block_K=64, dtype="float32"):
    N, C, H, W, F, Cg, KH, KW, OH, OW = _sizes()

    @T.prim_func
    def conv2d_wgrad(dY: T.Tensor((N, F, OH, OW), dtype), X: T.Tensor((N, C, H, W), dtype),
                     S: T.Tensor((3,), "int32"), dW: T.Tensor((F, Cg, KH, KW), dtype)):
        groups = C // Cg
        Fg = F // groups
        depth, pixels = Cg * KH * KW, N * OH * OW
        with T.Kernel(T.ceildiv(depth, block_N), T.ceildiv(Fg, block_M), groups,
                      threads=128) as (bx, by, gz):
            stride, pad, dil = S[0], S[1], S[2]
            dYf = T.Tensor((N * F * OH * OW,), dtype, dY.data)
            Xf = T.Tensor((N * C * H * W,), dtype, X.data)
            dWf = T.Tensor((F * depth,), dtype, dW.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            d_h = T.alloc_fragment((block_N,), "int32")  # kh (or far off past depth)
            d_w = T.alloc_fragment((block_N,), "int32")
            d_at = T.alloc_fragment((block_N,), "int32")  # offset of (group c, kh, kw)
            q_h = T.alloc_fragment((block_K,), "int32")  # oh * stride - pad (or far off)
            q_w = T.alloc_fragment((block_K,), "int32")
            q_x = T.alloc_fragment((block_K,), "int32")  # offset of X[n, 0, q_h, q_w]
            q_y = T.alloc_fragment((block_K,), "int32")  # offset of dY[n, 0, oh, ow]
            for j in T.Parallel(block_N):
                d = bx * block_N + j
                c, kh, kw = d // (KH * KW), d % (KH * KW) // KW, d % KW
                d_h[j] = T.if_then_else(d < depth, kh * dil, -H - KH * dil)
                d_w[j] = kw * dil
                d_at[j] = (gz * Cg + c) * H * W + d_h[j] * W + d_w[j]
            T.clear(acc)
            for k in T.serial(T.ceildiv(pixels, block_K)):
                for j in T.Parallel(block_K):
                    q = k * block_K + j
                    n, oh, ow = q // (OH * OW), q % (OH * OW) // OW, q % OW
                    q_h[j] = T.if_then_else(q < pixels, oh * stride - pad, -H - KH * dil)
                    q_w[j] = ow * stride - pad
                    q_x[j] = n * C * H * W + q_h[j] * W + q_w[j]
                    q_y[j] = n * F * OH * OW + oh * OW + ow
                for i, j in T.Parallel(block_M, block_K):
                    f, q = by * block_M + i, k * block_K + j
                    A_s[i, j] = T.if_then_else(f < Fg and q < pixels,
                                               dYf[q_y[j] + (gz * Fg + f) * OH * OW], 0.0)
                for i, j in T.Parallel(block_K, block_N):
                    ih, iw = q_h[i] + d_h[j], q_w[i] + d_w[j]
                    ok = ih >= 0 and ih < H and iw >= 0 and iw < W
                    B_s[i, j] = T.if_then_else(ok, Xf[q_x[i] + d_at[j]], 0.0)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                f, d = by * block_M + i, bx * block_N + j
                if f < Fg and d < depth:
                    dWf[(gz * Fg + f) * depth + d] = acc[i, j]

    return conv2d_wgrad
