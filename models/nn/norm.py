"""The functional forms of normalisation, embedding and dropout (re-exported by
nn.functional): layer_norm, rms_norm, batch_norm, embedding, dropout. Normalisation is the
row kernels of models/kernels/norms.py (BatchNorm's channels moved to rows by a transpose).
LayerNorm's and RMSNorm's weight and bias are applied in the normalising launch and their
gradients are one column-sum launch (models/kernels/norm_affine.py) where x, weight and
bias share a float32/float64 dtype; otherwise, and for BatchNorm, they are the elementwise
ops, whose gradients come from autograd.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import dropout as D
from tilepy.models.kernels import embedding as Em
from tilepy.models.kernels import norm_affine as NA
from tilepy.models.kernels import norms as N
from tilepy.models.kernels.launch import fast_mode, launch
from tilepy.models.kernels.record import contiguous, filled
from tilepy.models.nn import indices as ix
from tilepy.models.nn import init
from tilepy.models.ops import as_tensor, in_float32, is_narrow, record
from tilepy.models.tensor import Tensor


def _rows(x: np.ndarray, eps: float, center: float):
    """(xhat, mean, var, rstd, cfg) of each row of a 2-d array."""
    m = x.shape[0]
    cfg = K.const((eps, center), x.dtype)
    xhat = np.empty(x.shape, x.dtype)
    mean, var, rstd = (np.empty((m,), x.dtype) for _ in range(3))
    launch(K.kernel(N.row_norm_fwd, dtype=x.dtype, **N.tiles(x.shape[1], fast_mode())),
           contiguous(x), cfg, xhat, mean, var, rstd)
    return xhat, mean, var, rstd, cfg


def _rows_bwd(xhat, rstd, g, cfg) -> np.ndarray:
    dx = np.empty(xhat.shape, xhat.dtype)
    launch(K.kernel(N.row_norm_bwd, dtype=xhat.dtype, **N.tiles(xhat.shape[1], fast_mode())),
           xhat, rstd, contiguous(g), cfg, dx)
    return dx


def _normalize_last(x: Tensor, n: int, eps: float, center: float) -> Tensor:
    """x normalised over its last n elements per row (LayerNorm / RMSNorm without affine;
    bfloat16/float16 in float32)."""
    if is_narrow(x):
        return in_float32(_normalize_last, x, n, eps, center)
    x2 = x.data.reshape(-1, n)
    xhat, _, _, rstd, cfg = _rows(x2, eps, center)

    def bwd(g):
        return (_rows_bwd(xhat, rstd, g.reshape(xhat.shape), cfg).reshape(x.shape),)
    return record(xhat.reshape(x.shape), (x,), bwd, "layer_norm" if center else "rms_norm")


def _check_last(who: str, x: Tensor, shape: tuple) -> int:
    if x.shape[x.ndim - len(shape):] != tuple(shape) or x.ndim < len(shape):
        raise model_error(f"{who}: expected input of shape (..., {', '.join(map(str, shape))})"
                          f"; got {x.shape}")
    return int(np.prod(shape))


def _fusable(x: Tensor, shape: tuple, weight, bias) -> bool:
    """Whether the affine map goes into the normalising launch: a weight (and bias, if
    any) of the normalised shape and x's dtype, float32 or float64."""
    if (not isinstance(weight, Tensor) or weight.shape != shape or weight.dtype != x.dtype
            or is_narrow(x)):
        return False
    return bias is None or (isinstance(bias, Tensor) and bias.shape == shape
                            and bias.dtype == x.dtype)


def _normalize_affine(x: Tensor, n: int, eps: float, center: float, weight: Tensor,
                      bias, name: str) -> Tensor:
    """x normalised over its last n elements per row, times weight, plus bias when given:
    one forward launch; the backward launches norm_affine_bwd for x and col_sums for
    weight and bias, each only when needed."""
    x2, dt = contiguous(x.data).reshape(-1, n), x.dtype
    tiles = N.tiles(n, fast_mode())
    cfg = K.const((eps, center), dt)
    w = K.flat(weight.data)
    y, xhat, rstd = np.empty(x2.shape, dt), np.empty(x2.shape, dt), np.empty(x2.shape[:1], dt)
    launch(K.kernel(NA.norm_affine_fwd, dtype=dt, bias=bias is not None, **tiles), x2, w,
           w if bias is None else K.flat(bias.data), cfg, y, xhat, rstd)
    parents = (x, weight) if bias is None else (x, weight, bias)

    def bwd(g):
        g2 = contiguous(g).reshape(xhat.shape)
        dx = dw = db = None
        if x.requires_grad:
            dx = np.empty(xhat.shape, dt)
            launch(K.kernel(NA.norm_affine_bwd, dtype=dt, **tiles), xhat, rstd, g2, w, cfg, dx)
            dx = dx.reshape(x.shape)
        if any(p.requires_grad for p in parents[1:]):
            dw, db = np.empty(weight.shape, dt), np.empty(weight.shape, dt)
            launch(K.kernel(NA.col_sums, dtype=dt), g2, xhat, dw.reshape(-1), db.reshape(-1))
        return (dx, dw, db)[:len(parents)]
    return record(y.reshape(x.shape), parents, bwd, name)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5,
               who: object = "layer_norm") -> Tensor:
    x, shape = as_tensor(x), tuple(normalized_shape)
    n = _check_last(who, x, shape)
    if _fusable(x, shape, weight, bias):
        return _normalize_affine(x, n, eps, 1.0, weight, bias, "layer_norm")
    y = _normalize_last(x, n, eps, 1.0)
    y = y * weight if weight is not None else y
    return y + bias if bias is not None else y


def rms_norm(x, normalized_shape, weight=None, eps: float = 1e-6,
             who: object = "rms_norm") -> Tensor:
    x, shape = as_tensor(x), tuple(normalized_shape)
    n = _check_last(who, x, shape)
    if _fusable(x, shape, weight, None):
        return _normalize_affine(x, n, eps, 0.0, weight, None, "rms_norm")
    y = _normalize_last(x, n, eps, 0.0)
    return y * weight if weight is not None else y


def _channels_to_rows(a: np.ndarray) -> np.ndarray:
    return contiguous(np.moveaxis(a, 1, 0)).reshape(a.shape[1], -1)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5, who: object = "batch_norm") -> Tensor:
    """Per-channel normalisation of (N, C, ...) input: batch statistics while training
    (updating the running ones in place), the running statistics in evaluation."""
    x = as_tensor(x)
    if is_narrow(x) or is_narrow(weight):
        return in_float32(batch_norm, x, running_mean, running_var, weight, bias, training,
                          momentum, eps, who)
    c = running_mean.shape[0]
    if x.ndim < 2 or x.shape[1] != c:
        raise model_error(f"{who}: expected input of shape (N, {c}, ...); got {x.shape}")
    bshape = (1, c) + (1,) * (x.ndim - 2)
    if training:
        rows = _channels_to_rows(x.data)
        xhat, mean, var, rstd, cfg = _rows(rows, eps, 1.0)
        moved = (x.shape[1], x.shape[0], *x.shape[2:])

        def bwd(g):
            dx = _rows_bwd(xhat, rstd, _channels_to_rows(g), cfg)
            return (contiguous(np.moveaxis(dx.reshape(moved), 0, 1)),)
        y = record(contiguous(np.moveaxis(xhat.reshape(moved), 0, 1)), (x,), bwd,
                   "batch_norm")
        n = rows.shape[1]
        _running(running_mean, mean, momentum, 1.0)
        _running(running_var, var, momentum, n / max(n - 1, 1))
    else:
        scale = K.unary(running_var, "rsqrt", 1.0, eps)
        y = (x - Tensor(running_mean.reshape(bshape))) * Tensor(scale.reshape(bshape))
    y = y * weight.reshape(bshape) if weight is not None else y
    return y + bias.reshape(bshape) if bias is not None else y


def _running(stat: np.ndarray, batch: np.ndarray, momentum: float, unbias: float) -> None:
    """stat = (1 - momentum) * stat + momentum * unbias * batch, in place (kernels)."""
    K.binary(K.unary(stat, "affine", 1.0 - momentum, 0.0),
             K.unary(batch, "affine", momentum * unbias, 0.0), "add", out=stat)


def _draw_key(key: np.ndarray, seed: int | None) -> None:
    """key = (seed, 0), the seed drawn from nn.manual_seed's generator unless given."""
    key[0], key[1] = init.seed() if seed is None else seed, 0


def embedding(idx, weight: Tensor, who: object = "embedding") -> Tensor:
    """weight[idx] for an integer array idx of any shape; the gradient sums each row's
    occurrences in position order, one kernel over every row of the table (0 for a row
    that does not occur)."""
    if is_narrow(weight):  # the gradient's sums in float32
        return in_float32(embedding, idx, weight, who)
    idx = np.asarray(idx.data if isinstance(idx, Tensor) else idx)
    v, d = weight.shape
    if idx.dtype.kind not in "iu":
        raise model_error(f"{who}: indices must be integers; got dtype {idx.dtype}")
    ix.check_range(idx, v, who)
    flat = ix.flat_int32(idx)
    out = np.empty((flat.size, d), weight.dtype)
    launch(K.kernel(Em.embedding_fwd, dtype=weight.dtype), weight.data, flat, out)

    def bwd(g):
        order, starts = ix.sort_plan(flat, v)
        gw = np.empty(weight.shape, weight.dtype)  # every row written (0 where none occurs)
        launch(K.kernel(Em.embedding_bwd, dtype=weight.dtype),
               contiguous(g).reshape(-1, d), order, starts, gw)
        return (gw,)
    return record(out.reshape(*idx.shape, d), (weight,), bwd, "embedding")


def dropout(x, p: float = 0.5, training: bool = True, seed: int | None = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); the mask is a
    function of (seed, element index): a seed is drawn from nn.manual_seed's generator
    unless given, and the backward recomputes the same mask."""
    x = as_tensor(x)
    if not 0.0 <= p < 1.0:
        raise model_error(f"dropout: p must be in [0, 1); got {p}")
    if not training or p == 0.0:
        return x
    if is_narrow(x):  # the 1/(1-p) scale in float32
        return in_float32(dropout, x, p, training, seed)
    key = filled(_draw_key, np.empty(2, np.uint32), seed)  # drawn again on replay
    params = K.const((p, 1.0 / (1.0 - p)), x.dtype)

    def apply(a: np.ndarray) -> np.ndarray:
        out = np.empty(a.shape, a.dtype)
        launch(K.kernel(D.dropout, dtype=a.dtype), K.flat(a), key, params, out.reshape(-1))
        return out
    return record(apply(x.data), (x,), lambda g: (apply(g),), "dropout")
