"""`T.im2col` / `T.c2d_im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)`:
one tile of the im2col matrix of an NHWC image, written as the explicit loop TileLang's
own convolution example uses where the instruction is missing (zero padding outside the
image). A macro, inlined at the call; it names the two builtins it uses itself (the front
end knows builtins by name), so it needs no import of the language module.
"""

from types import SimpleNamespace

from tilepy.frontend.surface import Builtin

T = SimpleNamespace(Parallel=Builtin("Parallel"), if_then_else=Builtin("if_then_else"))


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad):
    _, H, W, C = img.shape
    block_m, block_k = col.shape
    OH = (H + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    for i, j in T.Parallel(block_m, block_k):
        k = c_step * block_k + j
        m = nhw_step * block_m + i
        h = m % (OH * OW) // OW * stride + k // (kernel * C) * dilation - pad
        w = m % OW * stride + k // C % kernel * dilation - pad
        inside = (h >= 0) and (w >= 0) and (h < H) and (w < W)
        col[i, j] = T.if_then_else(inside, img[m // (OH * OW), h, w, k % C], 0)


im2col.__tilepy_macro__ = True
