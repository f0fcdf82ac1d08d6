"""nn.functional: the layer ops as functions of Tensors (PyTorch's names and layouts).
Each validates its inputs (a ModelError naming the op and both shapes) and records one
graph node whose forward and backward are tile kernels (models/kernels, tilepy/kernels).
`who` (the calling layer, or a name) is formatted into a message only when one is raised.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import conv as C
from tilepy.models.kernels import pool as P
from tilepy.models.kernels import record as hooks
from tilepy.models.kernels.launch import fast_mode, launch
from tilepy.models.kernels.xent import softmax_xent
from tilepy.models.nn import padded
from tilepy.models.ops import (
    NARROW,
    activation,
    as_tensor,
    cast,
    cast_hint,
    in_float32,
    is_narrow,
    record,
)
from tilepy.models.tensor import Tensor

MAX_CLASSES = 1024


def relu(x: Tensor) -> Tensor:
    return activation(x, "relu")


def gelu(x: Tensor) -> Tensor:
    return activation(x, "gelu")


def silu(x: Tensor) -> Tensor:
    return activation(x, "silu")


def tanh(x: Tensor) -> Tensor:
    return activation(x, "tanh")


def sigmoid(x: Tensor) -> Tensor:
    return activation(x, "sigmoid")


def _float(op: str, x: Tensor, like: Tensor) -> Tensor:
    """x in the weight's dtype: a float32/float64 input to bfloat16/float16 weights is
    rounded to theirs (autocast's rule for gemms); other mismatches are errors."""
    if x.dtype != like.dtype and like.dtype.name in NARROW and x.dtype.kind == "f":
        return cast(x, like.dtype)
    if x.dtype != like.dtype:
        raise model_error(f"{op}: input dtype {x.dtype} does not match the weight's "
                          f"{like.dtype}", hint=f"convert the input: {cast_hint(like.dtype)}")
    return x


def _linear_input(x, weight: Tensor, who) -> Tensor:
    x = as_tensor(x)
    in_f = weight.shape[1]
    if x.ndim < 1 or x.shape[-1] != in_f:
        raise model_error(f"{who}: expected input of shape (..., {in_f}); got {x.shape}")
    return _float(who, x, weight)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, who: object = "linear"):
    """x @ weight.T + bias; weight is (out_features, in_features)."""
    x = _linear_input(x, weight, who)
    x2 = x.data.reshape(-1, weight.shape[1])
    y = K.matmul(x2, weight.data.T)
    if bias is not None:
        K.binary(y, bias.data, "add", out=y)
    parents = (x, weight) if bias is None else (x, weight, bias)
    return record(y.reshape(*x.shape[:-1], weight.shape[0]), parents,
                  _linear_bwd(x, x2, weight, bias), "linear")


def linear_gelu(x: Tensor, weight: Tensor, bias: Tensor, who: object = "linear"):
    """gelu(linear(x, weight, bias)) as one op whose bias add and GELU are one launch
    (models/kernels/gelu.py gelu_bias_fwd): the values and gradients of the two ops."""
    x = _linear_input(x, weight, who)
    if bias is None or bias.dtype != weight.dtype:
        return gelu(linear(x, weight, bias, who))
    x2 = x.data.reshape(-1, weight.shape[1])
    h = K.matmul(x2, weight.data.T)
    y, cdf = K.gelu_bias(h, bias.data)  # h is now h + bias, what GELU's backward reads
    lin_bwd = _linear_bwd(x, x2, weight, bias)
    return record(y.reshape(*x.shape[:-1], weight.shape[0]), (x, weight, bias),
                  lambda g: lin_bwd(K.gelu_bwd(h, cdf, g)), "linear_gelu")


def _linear_bwd(x: Tensor, x2: np.ndarray, weight: Tensor, bias):
    """The gradients of x @ weight.T + bias from the output's gradient g."""
    out_f = weight.shape[0]

    def bwd(g):
        g2 = g.reshape(-1, out_f)
        gx = K.matmul(g2, weight.data).reshape(x.shape) if x.requires_grad else None
        if weight.requires_grad and bias is not None and not fast_mode():
            # exact mode's gemm and row sums read g transposed: one copy serves both (the
            # same arrays as matmul's and reduce's own copies, so the same bits)
            gt = hooks.contiguous(g2.T)
            return gx, K.matmul(gt, x2), K.row_reduce2d(gt, "sum")
        gw = K.matmul(g2.T, x2) if weight.requires_grad else None
        gb = K.reduce(g2, (0,), "sum", False) if bias is not None else None
        return gx, gw, gb
    return bwd


def cross_entropy(logits: Tensor, target) -> Tensor:
    """Mean softmax cross-entropy of (M, C) logits against M integer class labels: one
    fused kernel computes the loss and its gradient (bfloat16/float16 logits: in float32,
    and the loss is float32, as under torch's autocast)."""
    logits = as_tensor(logits)
    if is_narrow(logits):
        return cross_entropy(cast(logits, np.float32), target)
    labels = np.asarray(target.data if isinstance(target, Tensor) else target)
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise model_error(f"cross_entropy: expected logits (M, C) and labels (M,); got "
                          f"logits {logits.shape} and labels {labels.shape}")
    m, c = logits.shape
    if labels.dtype.kind not in "iu":
        raise model_error(f"cross_entropy: labels must be integers; got dtype {labels.dtype}")
    _labels_in_range(labels, c)
    if not 0 < c <= MAX_CLASSES:
        raise model_error(f"cross_entropy: supports 1 to {MAX_CLASSES} classes; got {c}")
    block_c = max(16, 1 << (c - 1).bit_length())
    loss = np.empty((1,), logits.dtype)
    dx = np.empty(logits.shape, logits.dtype)
    launch(softmax_xent(block_C=block_c, dtype=K.dtype_name(logits.dtype)),
           hooks.contiguous(logits.data), hooks.astype(labels, np.dtype(np.int32)), loss, dx)

    def bwd(g):
        a = float(g.reshape(-1)[0])
        return (dx if a == 1.0 else K.unary(dx, "affine", a, 0.0),)
    return record(loss.reshape(()), (logits,), bwd, "cross_entropy")


_FEW_LABELS = 512  # up to this many, the range check runs on a list (below)


@hooks.host_op  # a captured step checks each call's labels
def _labels_in_range(labels: np.ndarray, c: int) -> None:
    # Between a replay's kernels a numpy reduction of a batch's labels costs tens of us of
    # CPU (its call path is out of the caches); min and max of a short list cost a few.
    if labels.size <= _FEW_LABELS:
        values = labels.tolist()
        bad = bool(values) and (min(values) < 0 or max(values) >= c)
    else:
        bad = labels.min() < 0 or labels.max() >= c
    if bad:
        raise model_error(f"cross_entropy: labels must lie in [0, {c}); got values from "
                          f"{labels.min()} to {labels.max()}")


def _pair(v, name: str) -> int:
    if isinstance(v, (tuple, list)):
        if len(set(v)) != 1:
            raise model_error(f"{name}={tuple(v)}: only square values are supported")
        v = v[0]
    return int(v)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           groups: int = 1, who: object = "conv2d") -> Tensor:
    """NCHW input, (F, C/groups, KH, KW) weight (bfloat16/float16: computed in float32)."""
    x = as_tensor(x)
    if is_narrow(weight):
        return in_float32(conv2d, _float(who, x, weight), weight, bias, stride, padding,
                          groups, who)
    x, y, grads = _conv(x, weight, bias, stride, padding, groups, who, False)
    parents = (x, weight) if bias is None else (x, weight, bias)
    return record(y, parents, grads, "conv2d")


def _conv(x: Tensor, weight: Tensor, bias, stride, padding, groups: int, who, relu: bool):
    """The checked input, the convolution's output (relu: with the ReLU applied as it is
    stored; groups 1 only) and its backward (dY -> dX, dW, dB)."""
    s, p = _pair(stride, "stride"), _pair(padding, "padding")
    f, cg, kh, kw = weight.shape
    if x.ndim != 4 or x.shape[1] != cg * groups:
        raise model_error(f"{who}: expected input of shape (N, {cg * groups}, H, W); got "
                          f"{x.shape}")
    x = _float(who, x, weight)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    if oh < 1 or ow < 1:
        raise model_error(f"{who}: input {x.shape} is smaller than the {kh}x{kw} kernel "
                          f"(padding {p})")
    d = K.dtype_name(x.dtype)
    S = K.const((s, p, 1), np.int32)  # stride, padding, dilation
    xd = hooks.contiguous(x.data)
    b = bias.data if bias is not None else K.const((0,) * f, x.dtype)
    if groups == 1:
        y = padded.conv(padded.pad(xd, p), weight.data, b, s, (oh, ow), relu)
    else:
        y = np.empty((n, f, oh, ow), x.dtype)
        launch(C.conv2d_fwd(dtype=d), xd, weight.data, b, S, y)

    def bwd(g):
        g = hooks.contiguous(g)
        gx = gw = gb = None
        if x.requires_grad:
            gx = _dgrad(g, weight.data, x.shape, s, p, groups)
        # the bias gradient in the weight gradient's launch where that is conv2d_padded
        in_wgrad = bias is not None and weight.requires_grad and s == 1 and groups == 1
        if in_wgrad:
            gb = np.empty((f,), g.dtype)
        if weight.requires_grad:
            gw = _wgrad(g, xd, weight.shape, s, p, groups, gb)
        if bias is not None and not in_wgrad:
            gb = K.reduce(g, (0, 2, 3), "sum", False)
        return gx, gw, gb
    return x, y, bwd


def _fwd(x: np.ndarray, w: np.ndarray, pad: int, out_hw: tuple,
         row_sums: np.ndarray | None = None) -> np.ndarray:
    """A stride-1 forward convolution (no bias) with the forward kernel (without groups
    conv2d_padded, which gives its bits; it fills `row_sums` if given: padded.conv)."""
    if x.shape[1] == w.shape[1]:
        return padded.conv(padded.pad(x, pad), w, K.const((0,) * w.shape[0], x.dtype), 1,
                           out_hw, row_sums=row_sums)
    out = np.empty((x.shape[0], w.shape[0], *out_hw), x.dtype)
    launch(K.kernel(C.conv2d_fwd, dtype=x.dtype), hooks.contiguous(x),
           hooks.contiguous(w), K.const((0,) * w.shape[0], x.dtype),
           K.const((1, pad, 1), np.int32), out)
    return out


def _dgrad(g, w, x_shape, stride: int, pad: int, groups: int) -> np.ndarray:
    """dX. Stride 1: the forward kernel on dY with the filters flipped and their in/out
    channels swapped (padding KH-1-pad), one compiled kernel fewer; else conv2d_dgrad."""
    f, cg, kh, kw = w.shape
    if stride == 1 and kh == kw and pad <= kh - 1:
        flipped = w.reshape(groups, f // groups, cg, kh, kw).transpose(0, 2, 1, 3, 4)
        flipped = flipped.reshape(groups * cg, f // groups, kh, kw)[:, :, ::-1, ::-1]
        return _fwd(g, flipped, kh - 1 - pad, x_shape[2:])
    gx = np.empty(x_shape, g.dtype)
    launch(K.kernel(C.conv2d_dgrad, dtype=g.dtype), g, w, K.const((stride, pad, 1), np.int32),
           gx)
    return gx


def _wgrad(g, x, w_shape, stride: int, pad: int, groups: int, db=None) -> np.ndarray:
    """dW. Stride 1 without groups: the forward kernel with the batch as channels (X's
    channels as the batch, dY's planes as the filters; given `db`, it also gets the bias
    gradient, each filter's dY summed in row_reduce's order); else conv2d_wgrad."""
    if stride == 1 and groups == 1:
        out = _fwd(x.transpose(1, 0, 2, 3), g.transpose(1, 0, 2, 3), pad, w_shape[2:], db)
        return hooks.contiguous(out.transpose(1, 0, 2, 3))
    gw = np.empty(w_shape, g.dtype)
    launch(K.kernel(C.conv2d_wgrad, dtype=g.dtype), g, x, K.const((stride, pad, 1), np.int32),
           gw)
    return gw


def _pool(kind: str, x: Tensor, kernel_size, stride, padding, who: object,
          count_include_pad: bool = True) -> Tensor:
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None else _pair(stride, "stride")
    p = _pair(padding, "padding")
    if not 0 <= p <= k // 2:
        raise model_error(f"{who}: padding must lie in [0, kernel_size // 2 = {k // 2}]; "
                          f"got padding={padding}", hint="PyTorch's limit: a window must "
                          "hold at least one input element")
    x = as_tensor(x)
    if is_narrow(x):
        return in_float32(_pool, kind, x, kernel_size, stride, padding, who, count_include_pad)
    if x.ndim != 4:
        raise model_error(f"{who}: expected input of shape (N, C, H, W); got {x.shape}")
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    if oh < 1 or ow < 1:
        raise model_error(f"{who}: input {x.shape} is smaller than the {k}x{k} window "
                          f"(padding {p})")
    d = K.dtype_name(x.dtype)
    tiled = s == k and not p and not h % k and not w % k  # windows tile the input
    S = K.const((k, s, p, int(bool(count_include_pad))) + (0,) * tiled, np.int32)
    fwd, bwd_kernel = (P.pool2d_tiled_fwd, P.pool2d_tiled_bwd) if tiled else \
        (P.pool2d_fwd, P.pool2d_bwd)
    y, arg = _pool_fwd(fwd, kind, d, hooks.contiguous(x.data), S, (n, c, oh, ow))

    def bwd(g):
        gx = np.empty(x.shape, x.dtype)
        launch(K.kernel(bwd_kernel, kind=kind, dtype=d), hooks.contiguous(g), arg, S, gx)
        return (gx,)
    return record(y, (x,), bwd, f"{kind}_pool2d")


def _pool_fwd(kernel, kind: str, d: str, x: np.ndarray, S: np.ndarray, shape: tuple):
    y, arg = np.empty(shape, x.dtype), np.empty(shape, np.int32)
    launch(K.kernel(kernel, kind=kind, dtype=d), x, S, y, arg)
    return y, arg


def conv2d_relu_maxpool(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding,
                        kernel_size, who: object = "conv2d") -> Tensor:
    """max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), kernel_size) with the
    same values and gradients. Where the windows tile the conv's output (stride = window,
    as MaxPool2d's default), one node of fewer launches: the ReLU in the conv's store,
    its mask in the pool's argmax (-1 where the maximum is 0: that window's gradient is
    +0.0, the ReLU backward's value), so neither way has a ReLU launch. Else the three ops."""
    x, k = as_tensor(x), _pair(kernel_size, "kernel_size")
    if not is_narrow(weight) and x.ndim == 4 and weight.ndim == 4:
        s, p = _pair(stride, "stride"), _pair(padding, "padding")
        oh, ow = ((x.shape[i] + 2 * p - weight.shape[i]) // s + 1 for i in (2, 3))
        if oh >= k and ow >= k and not oh % k and not ow % k:
            return _conv_relu_pool(x, weight, bias, stride, padding, k, who)
    return max_pool2d(relu(conv2d(x, weight, bias, stride, padding, 1, who)), k)


def _conv_relu_pool(x, weight, bias, stride, padding, k: int, who) -> Tensor:
    x, y, conv_bwd = _conv(x, weight, bias, stride, padding, 1, who, True)
    n, c, oh, ow = y.shape
    d, S = K.dtype_name(y.dtype), K.const((k, k, 0, 1, 1), np.int32)  # relu mask on
    out, arg = _pool_fwd(P.pool2d_tiled_fwd, "max", d, y, S, (n, c, oh // k, ow // k))

    def bwd(g):
        gy = np.empty(y.shape, y.dtype)
        launch(K.kernel(P.pool2d_tiled_bwd, kind="max", dtype=d), hooks.contiguous(g), arg,
               S, gy)
        return conv_bwd(gy)
    parents = (x, weight) if bias is None else (x, weight, bias)
    return record(out, parents, bwd, "conv2d_relu_max_pool2d")


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    return _pool("max", x, kernel_size, stride, padding, "max_pool2d")


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0,
               count_include_pad: bool = True) -> Tensor:
    return _pool("avg", x, kernel_size, stride, padding, "avg_pool2d", count_include_pad)


def flatten(x: Tensor, start_dim: int = 1) -> Tensor:
    return as_tensor(x).flatten(start_dim)


from tilepy.models.nn.norm import (  # noqa: E402 - built on the ops above
    batch_norm,
    dropout,
    embedding,
    layer_norm,
    rms_norm,
)

__all__ = ["avg_pool2d", "batch_norm", "conv2d", "cross_entropy", "dropout", "embedding",
           "flatten", "gelu", "layer_norm", "linear", "max_pool2d", "relu", "rms_norm",
           "sigmoid", "silu", "tanh"]

from tilepy.models.nn.attention import (  # noqa: E402
    bmm,
    scaled_dot_product_attention,
    softmax,
)

__all__ += ["bmm", "scaled_dot_product_attention", "softmax"]

from tilepy.models.nn.sparse import embedding_bag  # noqa: E402

__all__ += ["embedding_bag"]
