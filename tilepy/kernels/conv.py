"""2-d convolution, NHWC input, (KH, KW, C, F) filters, as an implicit im2col gemm: each
program computes a (block_M pixels) x (block_N filters) tile, its k-loop walking KH*KW*C in
steps of block_K. The A tile is gathered from the input (zero where the window falls in the
padding); the filters are re-viewed as a (KH*KW*C, F) matrix, the output as (N*OH*OW, F).
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def conv2d_nhwc(N, H, W, C, F, KH, KW, stride=1, pad=0, block_M=64, block_N=64, block_K=32,
                dtype="float32", accum_dtype="float32"):
    OH = (H + 2 * pad - KH) // stride + 1
    OW = (W + 2 * pad - KW) // stride + 1
    rows, depth = N * OH * OW, KH * KW * C

    @T.prim_func
    def conv2d_nhwc(X: T.Tensor((N, H, W, C), dtype), Wt: T.Tensor((KH, KW, C, F), dtype),
                    Y: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(rows, block_M), threads=128) as (bx, by):
            W_mat = T.Tensor((depth, F), dtype, Wt.data)
            Y_mat = T.Tensor((rows, F), dtype, Y.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(depth, block_K), num_stages=2):
                for i, j in T.Parallel(block_M, block_K):
                    r, d = by * block_M + i, k * block_K + j
                    n, oh, ow = r // (OH * OW), r % (OH * OW) // OW, r % OW
                    kh, kw, c = d // (KW * C), d // C % KW, d % C
                    ih, iw = oh * stride + kh - pad, ow * stride + kw - pad
                    if r < rows and d < depth and ih >= 0 and ih < H and iw >= 0 and iw < W:
                        A_s[i, j] = X[n, ih, iw, c]
                    else:
                        A_s[i, j] = 0.0
                T.copy(W_mat[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, Y_mat[by * block_M, bx * block_N])

    return conv2d_nhwc
