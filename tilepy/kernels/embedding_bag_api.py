"""Embedding bag's entry points: `embedding_bag_forward` (the bags and, for max, the
positions the backward needs), `embedding_bag_backward` (the sparse weight gradient: the
distinct indices and their rows) and `embedding_bag_weights_grad` (the per-sample weights'
gradient). They check the inputs, sort positions by index on the host and launch the
kernels of embedding_bag on the current backend: `launch(kernel, *arrays)` when given
(tilepy.models passes its launcher, which skips the per-call checks of arrays it built),
else the kernel's own call.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.embedding_bag import (
    embedding_bag_bwd,
    embedding_bag_fwd,
    embedding_bag_psw_grad,
)
from tilepy.kernels.inputs import input_error

MODES = ("sum", "mean", "max")


def _check(weight, indices, offsets, mode, psw):
    if mode not in MODES:
        raise input_error(f"embedding_bag: mode must be one of {MODES}; got {mode!r}",
                          hint="sum, mean or max")
    if weight.ndim != 2 or indices.ndim != 1 or indices.dtype.kind not in "iu":
        raise input_error(f"embedding_bag: expected a (num, dim) table and 1-d integer "
                          f"indices; got {weight.shape} and {indices.dtype}{indices.shape}",
                          hint="flatten the bags and pass offsets")
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise input_error(f"embedding_bag: indices must lie in [0, {weight.shape[0]}); got "
                          f"{indices.min()} to {indices.max()}", hint="check the vocabulary")
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1 or off[0] != 0 or np.any(np.diff(off) < 0) \
            or off[-1] != indices.size:
        raise input_error(f"embedding_bag: offsets must rise from 0 to {indices.size} (bags "
                          f"+ 1 entries); got {off.tolist()[:8]}",
                          hint="append len(indices) to torch's offsets")
    if psw is not None and (mode != "sum" or psw.shape != indices.shape):
        raise input_error(f"embedding_bag: per_sample_weights need mode 'sum' and the "
                          f"indices' shape {indices.shape}; got mode {mode!r}, {psw.shape}",
                          hint="as torch.nn.functional.embedding_bag")


def _call(kernel, *arrays) -> None:
    kernel(*arrays)


def _weights(psw, n: int, dtype) -> np.ndarray:
    return np.ones(n, dtype) if psw is None else np.ascontiguousarray(psw, dtype)


def embedding_bag_forward(weight, indices, offsets, mode="sum", per_sample_weights=None,
                          launch=_call):
    """(out (bags, dim), arg (bags, dim) int32): each bag's rows reduced by mode; arg is the
    position of each column's maximum (max mode; -1 in an empty bag)."""
    _check(weight, indices, offsets, mode, per_sample_weights)
    idx, off = (np.ascontiguousarray(x, np.int32) for x in (indices, offsets))
    out = np.empty((off.size - 1, weight.shape[1]), weight.dtype)
    arg = np.empty(out.shape, np.int32)
    launch(embedding_bag_fwd(mode, dtype=str(weight.dtype)), np.ascontiguousarray(weight),
           idx, off,
        _weights(per_sample_weights, idx.size, weight.dtype), out, arg)
    return out, arg


def embedding_bag_backward(dout, indices, offsets, mode="sum", arg=None,
                           per_sample_weights=None, launch=_call):
    """(rows, grads): the distinct indices, ascending, and the gradient of each one's table
    row, (rows.size, dim); every other row's gradient is 0. arg from the forward (max)."""
    idx, off = (np.ascontiguousarray(x, np.int32) for x in (indices, offsets))
    dout = np.ascontiguousarray(dout)
    order = np.argsort(idx, kind="stable").astype(np.int32)
    rows, starts = np.unique(idx[order], return_index=True)
    starts = np.append(starts, idx.size).astype(np.int32)
    bag = np.repeat(np.arange(off.size - 1, dtype=np.int32), np.diff(off))
    if arg is None:
        if mode == "max":
            raise input_error("embedding_bag_backward: max mode needs the forward's arg",
                              hint="pass arg from embedding_bag_forward")
        arg = np.zeros(dout.shape, np.int32)  # unread outside max mode
    grads = np.empty((rows.size, dout.shape[1]), dout.dtype)
    launch(embedding_bag_bwd(mode, dtype=str(dout.dtype)), dout, order, starts, bag, off,
           _weights(per_sample_weights, idx.size, dout.dtype),
           np.ascontiguousarray(arg, np.int32), grads)
    return rows.astype(np.int64), grads


def embedding_bag_weights_grad(weight, indices, offsets, dout, launch=_call):
    """The gradient of sum-mode per-sample weights: Weight[indices[p]] . dout[bag of p]."""
    idx, off = (np.ascontiguousarray(x, np.int32) for x in (indices, offsets))
    bag = np.repeat(np.arange(off.size - 1, dtype=np.int32), np.diff(off))
    out = np.empty(idx.size, weight.dtype)
    launch(embedding_bag_psw_grad(dtype=str(weight.dtype)), np.ascontiguousarray(weight), idx,
           bag, np.ascontiguousarray(dout, weight.dtype), out)
    return out
