"""2-d convolution, NHWC, stride 1, as a sum of shifted gemms ("direct" form): the input is
padded once (`pad_nhwc`), then each output tile accumulates, per filter tap (kh, kw), the
product of a run of padded-input rows (pixels, all channels) shifted by the tap's offset
with that tap's (C, F) filter slice. Rows are pixels of the padded grid, so a tap's A tile
is one contiguous slice of the padded image viewed as (N*Hp*Wp, C); rows that are not
outputs (the right and bottom borders) are computed and dropped at the store.
The explicit im2col form (`im2col_nhwc` + the library gemm) sits here too; `Conv2d` runs
either form with its arrays allocated once.
"""

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.backend import run
from tilepy.errors import ArgumentError
from tilepy.kernels.gemm import gemm
from tilepy.validation.errors import caller_loc


@tilepy.jit(out_idx=[-1])
def pad_nhwc(N, H, W, C, top, left, Hp, Wp, block=64, dtype="float32"):
    """Xp[n, i, j, c] = X[n, i - top, j - left, c] for Xp of size (N, Hp, Wp, C), zero
    outside X (top/left rows and columns of zeros, the rest up to Hp x Wp after X)."""
    rows = N * Hp * Wp

    @T.prim_func
    def pad_nhwc(X: T.Tensor((N, H, W, C), dtype), Xp: T.Tensor((N, Hp, Wp, C), dtype)):
        with T.Kernel(T.ceildiv(rows, block), threads=128) as bx:
            Xf = T.Tensor((N * H * W, C), dtype, X.data)
            Xpf = T.Tensor((rows, C), dtype, Xp.data)
            for i, c in T.Parallel(block, C):
                r = bx * block + i
                n, ih, iw = r // (Hp * Wp), r % (Hp * Wp) // Wp - top, r % Wp - left
                ok = ih >= 0 and ih < H and iw >= 0 and iw < W
                Xpf[r, c] = T.if_then_else(ok, Xf[(n * H + ih) * W + iw, c], 0.0)

    return pad_nhwc


@tilepy.jit(out_idx=[-1])
def conv2d_direct_nhwc(N, H, W, C, F, KH, KW, pad=0, dilation=1, block_M=256, block_N=64,
                       block_K=64, dtype="float32", accum_dtype="float32"):
    """Y = conv(X, Wt) from the padded input Xp (pad_nhwc's output), stride 1."""
    Hp, Wp = H + 2 * pad, W + 2 * pad
    OH, OW = Hp - dilation * (KH - 1), Wp - dilation * (KW - 1)
    rows = N * Hp * Wp
    ck = -(-C // block_K)

    @T.prim_func
    def conv2d_direct_nhwc(Xp: T.Tensor((N, Hp, Wp, C), dtype),
                           Wt: T.Tensor((KH, KW, C, F), dtype),
                           Y: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(rows, block_M), threads=128) as (bx, by):
            Xf = T.Tensor((rows, C), dtype, Xp.data)
            Wm = T.Tensor((KH * KW, C, F), dtype, Wt.data)
            Yf = T.Tensor((N * OH * OW, F), dtype, Y.data)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(acc)
            for t in T.serial(KH * KW):
                off = (t // KW) * dilation * Wp + (t % KW) * dilation
                for k in T.serial(ck):
                    T.copy(Xf[by * block_M + off, k * block_K], A_s)
                    T.copy(Wm[t, k * block_K, bx * block_N], B_s)
                    T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                r = by * block_M + i
                n, oh, ow = r // (Hp * Wp), r % (Hp * Wp) // Wp, r % Wp
                if r < rows and oh < OH and ow < OW:
                    Yf[(n * OH + oh) * OW + ow, bx * block_N + j] = acc[i, j]

    return conv2d_direct_nhwc


@tilepy.jit(out_idx=[-1])
def im2col_nhwc(N, H, W, C, KH, KW, stride=1, pad=0, dilation=1, block=64, dtype="float32"):
    """Col[(n, oh, ow), (kh, kw, c)] = X[n, oh*s + kh*d - pad, ow*s + kw*d - pad, c], zero
    outside X: the column matrix whose product with the filters viewed as (KH*KW*C, F) is
    the convolution (one block per (tap, run of `block` output pixels))."""
    OH = (H + 2 * pad - dilation * (KH - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (KW - 1) - 1) // stride + 1
    rows = N * OH * OW

    @T.prim_func
    def im2col_nhwc(X: T.Tensor((N, H, W, C), dtype), Col: T.Tensor((rows, KH * KW * C), dtype)):
        with T.Kernel(KH * KW, T.ceildiv(rows, block), threads=128) as (bx, by):
            Xf = T.Tensor((N * H * W, C), dtype, X.data)
            for i, c in T.Parallel(block, C):
                r = by * block + i
                n, oh, ow = r // (OH * OW), r % (OH * OW) // OW, r % OW
                ih = oh * stride - pad + bx // KW * dilation
                iw = ow * stride - pad + bx % KW * dilation
                if r < rows:
                    ok = ih >= 0 and ih < H and iw >= 0 and iw < W
                    Col[r, bx * C + c] = T.if_then_else(ok, Xf[(n * H + ih) * W + iw, c], 0.0)

    return im2col_nhwc


def _launch(kernel, *arrays) -> None:
    """Run a kernel whose sizes are all build-time on every array (outputs included)."""
    run(kernel.func, {p.name: a for p, a in zip(kernel.func.params, arrays)}, {})


class Conv2d:
    """conv2d NHWC (KH, KW, C, F filters) for one shape, by `form`: "direct" (pad_nhwc then
    conv2d_direct_nhwc; stride 1) or "im2col" (im2col_nhwc then the library gemm: in fast
    mode one BLAS call). Intermediate and output arrays are allocated once; a call
    overwrites the previous call's output."""

    def __init__(self, N, H, W, C, F, KH=3, KW=3, stride=1, pad=0, dilation=1,
                 form="direct", dtype="float32"):
        dt = np.dtype(dtype)
        OH = (H + 2 * pad - dilation * (KH - 1) - 1) // stride + 1
        OW = (W + 2 * pad - dilation * (KW - 1) - 1) // stride + 1
        self.y = np.empty((N, OH, OW, F), dt)
        if form == "direct":
            if stride != 1:
                raise ArgumentError(f"Conv2d: the direct form needs stride 1; got {stride}",
                                    caller_loc(), hint="use form='im2col' for strides")
            Hp, Wp = H + 2 * pad, W + 2 * pad
            self.steps = [(pad_nhwc(N, H, W, C, pad, pad, Hp, Wp, dtype=dtype),
                           np.empty((N, Hp, Wp, C), dt)),
                          (conv2d_direct_nhwc(N, H, W, C, F, KH, KW, pad, dilation,
                                              dtype=dtype), None)]
        elif form == "im2col":
            self.steps = [(im2col_nhwc(N, H, W, C, KH, KW, stride, pad, dilation, dtype=dtype),
                           np.empty((N * OH * OW, KH * KW * C), dt)), (None, None)]
        else:
            raise ArgumentError(f"Conv2d: form must be 'direct' or 'im2col'; got {form!r}",
                                caller_loc(), hint="pick one of the two forms")
        self.form, self.dtype = form, dtype

    def __call__(self, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        (k0, mid), (k1, _) = self.steps
        _launch(k0, x, mid)
        if self.form == "direct":
            _launch(k1, mid, wt, self.y)
        else:
            f = wt.shape[-1]
            g = gemm(in_dtype=self.dtype, out_dtype=self.dtype)
            run(g.func, {"A": mid, "B": wt.reshape(-1, f), "C": self.y.reshape(-1, f)},
                {"M": mid.shape[0], "N": f, "K": mid.shape[1]})
        return self.y
