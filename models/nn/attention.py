"""softmax, batched matmul and scaled dot-product attention as differentiable ops
(re-exported by nn.functional).
float32, bfloat16 and float16 inputs run the library's flash kernels
(tilepy.kernels.attention_api's, launched directly by models/kernels/flash.py: forward
with the row logsumexp, backward recomputing P; float32 accumulation), self- and
cross-attention alike (L queries, S keys, causal top-left aligned as torch SDPA's
is_causal); other dtypes (float64: finite differences) are composed: scores = q @ k^T *
scale (+ a causal mask of -inf), softmax, @ v, each a
kernel forward and backward. qkv_attention reads a (N, L, 3E) qkv projection in place
(no head split or merge copied); packed_attention takes the heads already split.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.attn_layout import DTYPES
from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import attention as A
from tilepy.models.kernels import record as hooks
from tilepy.models.kernels.flash import (
    flash_backward,
    flash_forward,
    packed_backward,
    packed_forward,
    packed_plan,
)
from tilepy.models.kernels.launch import launch
from tilepy.models.ops import as_tensor, in_float32, is_narrow, record
from tilepy.models.tensor import Tensor

FLASH_DTYPES = DTYPES  # the library kernels' inputs: float32, bfloat16, float16


def softmax(x, dim: int = -1) -> Tensor:
    """Softmax over the last dimension (kernels softmax_fwd, softmax_bwd)."""
    x = as_tensor(x)
    if is_narrow(x):
        return in_float32(softmax, x, dim)
    if dim not in (-1, x.ndim - 1):
        raise model_error(f"softmax: only the last dimension is supported; got dim={dim} for "
                          f"shape {x.shape}", hint="move the axis last with permute()")
    x2 = hooks.contiguous(x.data).reshape(-1, x.shape[-1])
    y = np.empty(x2.shape, x.dtype)
    launch(K.kernel(A.softmax_fwd, dtype=x.dtype), x2, y)

    def bwd(g):
        dx = np.empty(y.shape, y.dtype)
        launch(K.kernel(A.softmax_bwd, dtype=y.dtype), y,
               hooks.contiguous(g).reshape(y.shape), dx)
        return (dx.reshape(x.shape),)
    return record(y.reshape(x.shape), (x,), bwd, "softmax")


def _bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
    launch(K.kernel(A.bmm, dtype=a.dtype), hooks.contiguous(a), hooks.contiguous(b),
           out)
    return out


def bmm(x, y) -> Tensor:
    """Batched matmul (..., M, K) @ (..., K, N) with equal leading dims."""
    x, y = as_tensor(x), as_tensor(y)
    if is_narrow(x) and x.dtype == y.dtype:
        return in_float32(bmm, x, y)
    if (x.ndim < 3 or x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]
            or x.shape[-1] != y.shape[-2] or x.dtype != y.dtype):
        raise model_error(f"bmm: expected (..., M, K) @ (..., K, N) of one dtype; got "
                          f"{x.shape} {x.dtype} and {y.shape} {y.dtype}")
    lead = x.shape[:-2]
    a = x.data.reshape(-1, *x.shape[-2:])
    b = y.data.reshape(-1, *y.shape[-2:])
    out = _bmm(a, b)

    def bwd(g):
        g3 = g.reshape(out.shape)
        ga = _bmm(g3, np.swapaxes(b, 1, 2)).reshape(x.shape) if x.requires_grad else None
        gb = _bmm(np.swapaxes(a, 1, 2), g3).reshape(y.shape) if y.requires_grad else None
        return ga, gb
    return record(out.reshape(*lead, *out.shape[-2:]), (x, y), bwd, "bmm")


def scaled_dot_product_attention(q, k, v, is_causal: bool = False) -> Tensor:
    """softmax(q k^T / sqrt(d)) v for (..., L, d) queries and (..., S, d) keys/values."""
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    if q.ndim < 3 or k.shape != v.shape or q.shape[:-2] != k.shape[:-2] \
            or q.shape[-1] != k.shape[-1]:
        raise model_error(f"scaled_dot_product_attention: expected q (..., L, d), k and v "
                          f"(..., S, d); got {q.shape}, {k.shape}, {v.shape}")
    if not q.dtype == k.dtype == v.dtype:  # torch refuses these too
        raise model_error(f"scaled_dot_product_attention: expected q, k and v of one dtype; "
                          f"got {q.dtype}, {k.dtype}, {v.dtype}", hint="convert: x.to(q.dtype)")
    if K.dtype_name(q.dtype) in FLASH_DTYPES:
        return _flash(q, k, v, is_causal)
    return _composed(q, k, v, is_causal)


SMALL_BLOCK = 16  # tile of short sequences (both lengths at most this)
SMALL_ROWS = 4096  # query rows from which the short-sequence kernels are worth compiling


def _block(q4: np.ndarray, k4: np.ndarray) -> int:
    """The kernels' tile: 64, or SMALL_BLOCK when every query and key of a sequence fits
    in one such tile and the work is large enough to pay for its compiles. One tile
    covers all keys either way, and the larger tile only adds masked columns (zeros in
    every sum), so the results are the same bits."""
    return _tile(max(q4.shape[-2], k4.shape[-2]), q4.size // q4.shape[-1])


def _tile(length: int, rows: int) -> int:
    """_block's tile for sequences of at most `length` and `rows` query rows in all."""
    return SMALL_BLOCK if length <= SMALL_BLOCK and rows >= SMALL_ROWS else 64


def _flash(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """The library's flash attention, each leading index a batch of one head."""
    q4, k4, v4 = (x.data.reshape(-1, 1, *x.shape[-2:]) for x in (q, k, v))
    b = _block(q4, k4)
    o, lse = flash_forward(q4, k4, v4, causal, b)

    def bwd(g):
        grads = flash_backward(q4, k4, v4, o, lse, g.reshape(q4.shape), causal, b)
        return tuple(d.reshape(x.shape) for d, x in zip(grads, (q, k, v)))
    return record(o.reshape(q.shape), (q, k, v), bwd, "attention")


def packed_attention(qkv: Tensor, is_causal: bool = False) -> Tensor:
    """scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]) for a (3, ..., L, d) qkv, as
    one op: its gradient is the three gradients side by side (with three selections,
    each would be scattered into zeros and the three summed)."""
    qkv = as_tensor(qkv)
    if qkv.ndim < 4 or qkv.shape[0] != 3 or K.dtype_name(qkv.dtype) not in FLASH_DTYPES:
        return scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal)
    q4, k4, v4 = (hooks.contiguous(qkv.data[i]).reshape(-1, 1, *qkv.shape[-2:])
                  for i in range(3))
    b = _block(q4, k4)
    o, lse = flash_forward(q4, k4, v4, is_causal, b)

    def bwd(g):
        grads = flash_backward(q4, k4, v4, o, lse, g.reshape(q4.shape), is_causal, b,
                               packed=True)
        return (grads.reshape(qkv.shape),)
    return record(o.reshape(qkv.shape[1:]), (qkv,), bwd, "attention")


def qkv_attention(qkv, heads: int, is_causal: bool = False) -> Tensor:
    """Self-attention on a packed (N, L, 3E) qkv projection (q, k and v of each token side
    by side, `heads` heads of E / heads features) -> (N, L, E) with the heads merged: the
    values and gradient of splitting the heads (reshape to (N, L, 3, heads, d), permute
    to (3, N, heads, L, d)), packed_attention, and merging them back, without those
    copies: the flash kernels read the projection's rows and write their outputs in
    place (one op: its gradient is (N, L, 3E) as the projection's)."""
    qkv = as_tensor(qkv)
    if qkv.ndim != 3 or qkv.shape[2] % (3 * heads):
        raise model_error(f"qkv_attention: expected a (N, L, 3E) projection with E a "
                          f"multiple of heads={heads}; got {qkv.shape}")
    n, length, e3 = qkv.shape
    b = _tile(length, n * length * heads)
    if K.dtype_name(qkv.dtype) not in FLASH_DTYPES or \
            packed_plan(qkv.data, heads, is_causal, b).parts is None:
        split = qkv.reshape(n, length, 3, heads, e3 // (3 * heads)).permute(2, 0, 3, 1, 4)
        y = packed_attention(split, is_causal)
        return y.permute(0, 2, 1, 3).reshape(n, length, e3 // 3)
    data = hooks.contiguous(qkv.data)
    o, lse = packed_forward(data, heads, is_causal, b)

    def bwd(g):
        return (packed_backward(data, o, lse, g, heads, is_causal, b),)
    return record(o, (qkv,), bwd, "attention")


def _composed(q: Tensor, k: Tensor, v: Tensor, is_causal: bool) -> Tensor:
    perm = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    scores = bmm(q, k.permute(perm)) * (1.0 / float(np.sqrt(q.shape[-1])))
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        mask = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, 0.0)
        scores = scores + Tensor(mask.astype(q.dtype))
    return bmm(softmax(scores), v)
