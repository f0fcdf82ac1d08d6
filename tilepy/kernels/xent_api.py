"""Cross-entropy with torch's reductions: `cross_entropy` (the loss, reduced, and each row's
logsumexp for the backward) and `cross_entropy_backward` (dx), over the per-row kernels
of xent. reduction='none' | 'sum' | 'mean'; rows labelled ignore_index add nothing, and
'mean' divides by the number of rows not ignored, or with class weights by the sum of
their weights (torch.nn.functional.cross_entropy's definition; all rows ignored: NaN).
With weights and label smoothing both, the smoothing term weights each class (torch's
definition too): the weighted kernels of xent compute the rows' weighted losses.

The kernels compute each row's loss and gradient in float32; the reduction runs in
float64 (weight * loss products of float32 values are exact there; the row_reduce
kernel adds them in ascending order) and rounds once to float32.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.inputs import input_error
from tilepy.kernels.reductions import row_reduce
from tilepy.kernels.xent import xent_bwd, xent_bwd_weighted, xent_fwd, xent_fwd_weighted

REDUCTIONS = ("mean", "sum", "none")


def _check(x, labels, reduction, ignore_index, smoothing, weight):
    if reduction not in REDUCTIONS:
        raise input_error(f"cross_entropy: reduction must be one of {REDUCTIONS}; got "
                          f"{reduction!r}", hint="'mean' is torch's default")
    if x.ndim != 2 or labels.shape != x.shape[:1] or labels.dtype.kind not in "iu":
        raise input_error(f"cross_entropy: expected logits (M, C) and integer labels (M,); "
                          f"got {x.shape} and {labels.dtype}{labels.shape}",
                          hint="flatten the leading axes of both")
    bad = (labels != ignore_index) & ((labels < 0) | (labels >= x.shape[1]))
    if bad.any():
        raise input_error(f"cross_entropy: labels must lie in [0, {x.shape[1]}) or be "
                          f"ignore_index={ignore_index}; got {labels[bad][0]}",
                          hint="check the number of classes")
    if weight is not None and np.shape(weight) != (x.shape[1],):
        raise input_error(f"cross_entropy: class weights must have shape ({x.shape[1]},); "
                          f"got {np.shape(weight)}", hint="one weight per class")


def _class_weights(weight):
    """(W float32 (C,), WSum float32 (1,): their float64 sum rounded once) for the
    weighted kernels."""
    w = np.ascontiguousarray(weight, np.float32)
    return w, np.array([_sum64(w.astype(np.float64))], np.float32)


def _row_weights(labels, ignore_index, weight) -> np.ndarray:
    """float64 (M,): each row's weight in the reduction, 0 for ignored rows."""
    keep = labels != ignore_index
    if weight is None:
        return keep.astype(np.float64)
    w = np.asarray(weight, np.float32).astype(np.float64)
    return np.where(keep, w[np.where(keep, labels, 0)], 0.0)


def _sum64(values: np.ndarray) -> float:
    """The float64 sum of a vector, ascending (the row_reduce kernel)."""
    out = row_reduce("sum", 1, 256, "float64", "float64")(values.reshape(1, -1))
    return float(out[0])


def cross_entropy(x, labels, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                  weight=None):
    """(loss, lse): loss a float32 scalar array ('mean', 'sum') or (M,) ('none'); lse
    (M,) float32, for cross_entropy_backward."""
    x, labels = np.ascontiguousarray(x), np.asarray(labels)
    _check(x, labels, reduction, ignore_index, label_smoothing, weight)
    lab = np.ascontiguousarray(labels, np.int32)
    if weight is not None and label_smoothing != 0.0:  # the rows' losses carry the weights
        rows, lse = xent_fwd_weighted(ignore_index, label_smoothing, dtype=str(x.dtype))(
            x, lab, *_class_weights(weight))
        terms = rows.astype(np.float64)
    else:
        rows, lse = xent_fwd(ignore_index, label_smoothing, dtype=str(x.dtype))(x, lab)
        if weight is None and reduction == "none":
            return rows, lse
        terms = rows.astype(np.float64) * _row_weights(lab, ignore_index, weight)
    if reduction == "none":
        return terms.astype(np.float32), lse
    total = _sum64(terms)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.float64(total) / _sum64(_row_weights(lab, ignore_index, weight))
    return np.asarray(total, np.float32), lse


def cross_entropy_backward(x, labels, lse, dloss=1.0, reduction="mean", ignore_index=-100,
                           label_smoothing=0.0, weight=None):
    """dx (M, C) of `cross_entropy`'s loss, given dloss (a scalar for 'mean'/'sum', (M,)
    for 'none'): each row's dLoss is dloss times its weight (/ the weights' sum for
    'mean'), rounded once to float32 (with weights and smoothing both, dloss (/ the
    weights' sum) goes to the weighted kernel, which applies the class weights)."""
    x, labels = np.ascontiguousarray(x), np.asarray(labels)
    _check(x, labels, reduction, ignore_index, label_smoothing, weight)
    lab = np.ascontiguousarray(labels, np.int32)
    w = _row_weights(lab, ignore_index, weight)
    g = np.asarray(dloss, np.float32).astype(np.float64)
    if reduction == "mean":
        g = g / _sum64(w)
    lse = np.ascontiguousarray(lse, np.float32)
    if weight is not None and label_smoothing != 0.0:  # the kernel applies the weights
        d = np.ascontiguousarray(np.broadcast_to(g, lab.shape), np.float32)
        return xent_bwd_weighted(ignore_index, label_smoothing, dtype=str(x.dtype))(
            x, lab, lse, d, *_class_weights(weight))
    with np.errstate(invalid="ignore"):
        d = np.ascontiguousarray(np.broadcast_to(g * w, lab.shape), np.float32)
    return xent_bwd(ignore_index, label_smoothing, dtype=str(x.dtype))(x, lab, lse, d)
