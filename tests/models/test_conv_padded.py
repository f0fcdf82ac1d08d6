"""conv2d_padded (models/kernels/conv.py), the lowering of convolutions without groups,
gives the bits of the conv kernel it replaced (conv2d_fwd, and conv2d_fwd on the flipped
filters / the swapped batch and channels for the stride-1 input and weight gradients):
on the interpreter, and on the JIT against the interpreter."""

import numpy as np
import pytest

import tilepy
from tilepy.models import kops as K
from tilepy.models.kernels import conv as C
from tilepy.models.nn import functional as F
from tilepy.models.nn import padded


def _data(rng, *shape):
    a = rng.standard_normal(shape).astype(np.float32)
    a.reshape(-1)[::7] = 0.0  # zeros and negative zeros among the products
    a.reshape(-1)[3::11] = -0.0
    return a


def _conv2d_fwd(x, w, b, stride, pad):
    n, _, h, wd = x.shape
    f, _, kh, kw = w.shape
    y = np.empty((n, f, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1),
                 np.float32)
    C.conv2d_fwd(dtype="float32")(np.ascontiguousarray(x), np.ascontiguousarray(w), b,
                                  np.array([stride, pad, 1], np.int32), y)
    return y


def _same_bits(a, b):
    assert a.shape == b.shape and a.flags.c_contiguous
    np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))


@pytest.mark.parametrize("stride,pad", [(1, 2), (2, 1), (1, 0)])
def test_forward_gives_the_conv_kernels_bits(stride, pad):
    # 10 filters: two row blocks of 8; C*KH*KW = 75: a partial last k-step of 32
    rng = np.random.default_rng(stride * 10 + pad)
    x, w, b = _data(rng, 2, 3, 7, 6), _data(rng, 10, 3, 5, 5), _data(rng, 10)
    with tilepy.backend("interp"):
        want = _conv2d_fwd(x, w, b, stride, pad)
        got = padded.conv(padded.pad(x, pad), w, b, stride, want.shape[2:])
    _same_bits(got, want)


def test_input_and_weight_gradients_give_the_conv_kernels_bits():
    rng = np.random.default_rng(5)
    x, w, g = _data(rng, 3, 4, 5, 6), _data(rng, 6, 4, 3, 3), _data(rng, 3, 6, 5, 6)
    with tilepy.backend("interp"):
        dx = F._dgrad(g, w, x.shape, 1, 1, 1)
        db = np.full(6, np.nan, np.float32)
        dw = F._wgrad(g, x, w.shape, 1, 1, 1, db)  # the bias gradient in the same launch
        want_db = K.reduce(g, (0, 2, 3), "sum", False)
        flipped = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]  # what the old lowering ran
        want_dx = _conv2d_fwd(g, flipped, np.zeros(4, np.float32), 1, 1)
        want_dw = _conv2d_fwd(x.transpose(1, 0, 2, 3), g.transpose(1, 0, 2, 3),
                              np.zeros(6, np.float32), 1, 1).transpose(1, 0, 2, 3)
    _same_bits(dx, want_dx)
    _same_bits(dw, np.ascontiguousarray(want_dw))
    _same_bits(db, want_db)  # row_reduce's order: (n, h, w) ascending from +0


def test_the_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(6)
    # 150 output pixels: 5 column tiles of 32, so a block of 4 tiles and one of 1
    x, w, b = _data(rng, 5, 6, 6, 5), _data(rng, 11, 6, 5, 5), _data(rng, 11)
    xp = padded.pad(x, 2)
    sums = [np.full(11, np.nan, np.float32) for _ in range(2)]
    got = padded.conv(xp, w, b, 1, (6, 5), row_sums=sums[0])
    with tilepy.backend("interp"):
        want = padded.conv(xp, w, b, 1, (6, 5), row_sums=sums[1])
    _same_bits(got, want)
    _same_bits(*sums)
    _same_bits(sums[1], K.row_reduce2d(w.reshape(11, -1), "sum"))
