"""Fast mode's stride-1 convolutions without groups: the input's patches gathered by numpy
(im2col: padding and strided views, data movement only) and one gemm kernel launch (BLAS
tiles in fast mode), instead of the conv kernel's gathered tiles, whose index arithmetic
costs far more than the products at LeNet's sizes. Exact mode keeps the conv kernels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tilepy.models import kops as K


def im2col(x: np.ndarray, kh: int, kw: int, pad: int) -> np.ndarray:
    """(N*OH*OW, C*KH*KW) patches of NCHW `x` (stride 1), columns in (c, kh, kw) order."""
    if pad:  # (np.pad costs more than the copy at these sizes)
        n, c, h, w = x.shape
        padded = np.zeros((n, c, h + 2 * pad, w + 2 * pad), x.dtype)
        padded[:, :, pad:pad + h, pad:pad + w] = x
        x = padded
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))  # (N, C, OH, OW, KH, KW)
    n, c, oh, ow = win.shape[:4]
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * oh * ow, -1)


def conv(x: np.ndarray, w: np.ndarray, pad: int, bias: np.ndarray | None = None):
    """The stride-1 convolution of NCHW `x` with (F, C, KH, KW) `w` (+ bias), NCHW out.
    The bias rides as one more column of ones (summed with the products: fast mode)."""
    n, f, (kh, kw) = x.shape[0], w.shape[0], w.shape[2:]
    oh, ow = x.shape[2] + 2 * pad - kh + 1, x.shape[3] + 2 * pad - kw + 1
    cols, wt = im2col(x, kh, kw, pad), np.ascontiguousarray(w.reshape(f, -1).T)
    if bias is not None:
        cols = np.concatenate([cols, np.ones((cols.shape[0], 1), x.dtype)], axis=1)
        wt = np.concatenate([wt, bias.reshape(1, f)], axis=0)
    y = K.matmul(cols, wt)  # (N*OH*OW, F)
    return np.ascontiguousarray(y.reshape(n, oh, ow, f).transpose(0, 3, 1, 2))
