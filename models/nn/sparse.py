"""The functional form of EmbeddingBag (re-exported by nn.functional): bags of embedding
rows reduced by sum, mean or max, with optional per-sample weights (sum mode). The
forward, the sparse weight gradient and the per-sample weights' gradient are the
library's (tilepy.kernels.embedding_bag_api); this module converts torch's arguments.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.embedding_bag_api import (
    embedding_bag_backward,
    embedding_bag_forward,
    embedding_bag_weights_grad,
)
from tilepy.models.errors import model_error
from tilepy.models.kernels.launch import launch
from tilepy.models.ops import as_tensor, in_float32, is_narrow, record
from tilepy.models.tensor import Tensor

MODES = ("sum", "mean", "max")


def _bags(idx: np.ndarray, offsets, include_last: bool, who: str):
    """(flat int32 indices, int32 offsets with the end appended) from torch's two forms."""
    if idx.ndim == 2:
        if offsets is not None:
            raise model_error(f"{who}: offsets must be None for 2-d input {idx.shape} (each "
                              "row is a bag)", hint="flatten the input to pass offsets")
        offs = np.arange(0, idx.size + 1, max(idx.shape[1], 1), dtype=np.int64)
        offs = offs[:idx.shape[0] + 1] if idx.shape[1] else np.zeros(idx.shape[0] + 1)
    elif idx.ndim == 1:
        if offsets is None:
            raise model_error(f"{who}: 1-d input needs offsets (the start of each bag)",
                              hint="pass offsets=[0, ...] or a 2-d (bags, size) input")
        offs = np.asarray(offsets.data if isinstance(offsets, Tensor) else offsets)
        if offs.ndim != 1 or offs.dtype.kind not in "iu":
            raise model_error(f"{who}: offsets must be a 1-d integer array; got shape "
                              f"{offs.shape} dtype {offs.dtype}")
        offs = offs if include_last else np.append(offs, idx.size)
        if offs.size < 1 or offs[0] != 0 or np.any(np.diff(offs) < 0) or offs[-1] != idx.size:
            raise model_error(f"{who}: offsets must start at 0, not decrease and stay within "
                              f"the {idx.size} indices; got {offs.tolist()[:8]}")
    else:
        raise model_error(f"{who}: expected 1-d input with offsets or 2-d (bags, size) "
                          f"input; got shape {idx.shape}")
    return idx.reshape(-1).astype(np.int32), offs.astype(np.int32)


def _check(idx, weight, mode, psw, who):
    if mode not in MODES:
        raise model_error(f"{who}: mode must be 'sum', 'mean' or 'max'; got {mode!r}")
    if idx.dtype.kind not in "iu":
        raise model_error(f"{who}: indices must be integers; got dtype {idx.dtype}")
    v = weight.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= v):
        raise model_error(f"{who}: indices must lie in [0, {v}); got values from "
                          f"{idx.min()} to {idx.max()}")
    if psw is not None:
        if mode != "sum":
            raise model_error(f"{who}: per_sample_weights need mode='sum'; got {mode!r}")
        if psw.shape != idx.shape or psw.dtype != weight.dtype:
            raise model_error(f"{who}: per_sample_weights must match the input: expected "
                              f"shape {idx.shape} dtype {weight.dtype}; got {psw.shape} "
                              f"{psw.dtype}")


def embedding_bag(input, weight: Tensor, offsets=None, mode: str = "mean",
                  per_sample_weights=None, include_last_offset: bool = False,
                  who: object = "embedding_bag") -> Tensor:
    """(bags, dim): each bag's rows of weight reduced by `mode` (torch's arguments)."""
    if is_narrow(weight):  # the reductions in float32
        return in_float32(embedding_bag, input, weight, offsets, mode, per_sample_weights,
                          include_last_offset, who)
    idx = np.asarray(input.data if isinstance(input, Tensor) else input)
    psw = None if per_sample_weights is None else as_tensor(per_sample_weights)
    _check(idx, weight, mode, psw, who)
    flat, offs = _bags(idx, offsets, include_last_offset, who)
    w = None if psw is None else np.ascontiguousarray(psw.data).reshape(-1)
    out, arg = embedding_bag_forward(weight.data, flat, offs, mode, w, launch)

    def bwd(g):
        g = np.ascontiguousarray(g)
        gw = None
        if weight.requires_grad:
            rows, grads = embedding_bag_backward(g, flat, offs, mode, arg, w, launch)
            gw = np.zeros(weight.shape, weight.dtype)
            gw[rows] = grads  # distinct rows: a move, no arithmetic
        if psw is None:
            return (gw,)
        gp = embedding_bag_weights_grad(weight.data, flat, offs, g, launch).reshape(
            psw.shape) \
            if psw.requires_grad else None
        return gw, gp
    parents = (weight,) if psw is None else (weight, psw)
    return record(out, parents, bwd, f"embedding_bag_{mode}")
