"""Convolutions without groups through `conv2d_padded` (models/kernels/conv.py): the input
padded by numpy (data movement only), then one launch whose sums are conv2d_fwd's in its
order, so exact mode keeps conv2d_fwd's bits. The input gradient (stride 1) and the weight
gradient (stride 1) are forward convolutions too (functional._dgrad, _wgrad), so all three
run here when the layer has no groups.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.kernels import conv as C
from tilepy.models.kernels.launch import launch
from tilepy.models.kernels.record import contiguous, copy_into

_S: dict[tuple, np.ndarray] = {}


def pad(x: np.ndarray, p: int) -> np.ndarray:
    """4-d `x` (any strides) with p zeros around each plane, C-contiguous."""
    if not p:
        return contiguous(x)
    n, c, h, w = x.shape
    out = np.zeros((n, c, h + 2 * p, w + 2 * p), x.dtype)
    copy_into(out[:, :, p:p + h, p:p + w], x)  # the border stays zero (never written)
    return out


def conv(xp: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int,
         out_hw: tuple, relu: bool = False, row_sums: np.ndarray | None = None) -> np.ndarray:
    """conv2d_fwd's result for the padded input `xp`, (F, C, KH, KW) `w` and `bias`
    (with `relu`, relu_mask's values of it: the ReLU applied as it is stored). Given
    `row_sums` ((F,)), also fills it with each filter's sum (row_reduce's bits)."""
    key = (stride, relu, row_sums is not None)
    s = _S.get(key)
    if s is None:  # stride, dilation, relu, row sums
        s = _S[key] = np.array([stride, 1, int(relu), int(key[2])], np.int32)
        s.flags.writeable = False
    y = np.empty((xp.shape[0], w.shape[0], *out_hw), xp.dtype)
    kernel = K.kernel(C.conv2d_padded, dtype=xp.dtype, block_M=C.block_rows(w.shape[0]))
    sums = row_sums if row_sums is not None else np.empty(w.shape[:1], xp.dtype)
    launch(kernel, xp, contiguous(w), bias, s, y, sums)
    return y
