"""The functional form of EmbeddingBag (re-exported by nn.functional): bags of embedding
rows reduced by sum, mean or max, with optional per-sample weights (sum mode). The
forward, the weight gradient (every row of the table: models/nn/indices.py sorts the
positions) and the per-sample weights' gradient are the library's kernels
(tilepy.kernels.embedding_bag); this module converts torch's arguments.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.embedding_bag import (
    embedding_bag_bwd,
    embedding_bag_fwd,
    embedding_bag_psw_grad,
)
from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels.launch import launch
from tilepy.models.kernels.record import contiguous, filled, host_op
from tilepy.models.nn import indices as ix
from tilepy.models.ops import as_tensor, in_float32, is_narrow, record
from tilepy.models.tensor import Tensor

MODES = ("sum", "mean", "max")


def _bags(idx: np.ndarray, offsets, include_last: bool, who: str):
    """(flat int32 indices, int32 offsets with the end appended) from torch's two forms."""
    if idx.ndim == 2:
        if offsets is not None:
            raise model_error(f"{who}: offsets must be None for 2-d input {idx.shape} (each "
                              "row is a bag)", hint="flatten the input to pass offsets")
        step = idx.shape[1]
        starts = range(0, idx.size + 1, step) if step else (0,) * (idx.shape[0] + 1)
        return ix.flat_int32(idx), K.const(tuple(starts), np.int32)
    if idx.ndim != 1:
        raise model_error(f"{who}: expected 1-d input with offsets or 2-d (bags, size) "
                          f"input; got shape {idx.shape}")
    if offsets is None:
        raise model_error(f"{who}: 1-d input needs offsets (the start of each bag)",
                          hint="pass offsets=[0, ...] or a 2-d (bags, size) input")
    offs = np.asarray(offsets.data if isinstance(offsets, Tensor) else offsets)
    if offs.ndim != 1 or offs.dtype.kind not in "iu":
        raise model_error(f"{who}: offsets must be a 1-d integer array; got shape "
                          f"{offs.shape} dtype {offs.dtype}")
    _check_offsets(offs, idx.size, include_last, who)
    out = np.empty(offs.size + (0 if include_last else 1), np.int32)
    return ix.flat_int32(idx), filled(_with_end, out, offs, idx.size)


@host_op  # a captured step checks each call's offsets
def _check_offsets(offs: np.ndarray, m: int, include_last: bool, who: str) -> None:
    offs = offs if include_last else np.append(offs, m)
    if offs.size < 1 or offs[0] != 0 or np.any(np.diff(offs) < 0) or offs[-1] != m:
        raise model_error(f"{who}: offsets must start at 0, not decrease and stay within "
                          f"the {m} indices; got {offs.tolist()[:8]}")


def _with_end(out: np.ndarray, offs: np.ndarray, m: int) -> None:
    out[:offs.size] = offs
    out[offs.size:] = m


def _check(idx, weight, mode, psw, who):
    if mode not in MODES:
        raise model_error(f"{who}: mode must be 'sum', 'mean' or 'max'; got {mode!r}")
    if idx.dtype.kind not in "iu":
        raise model_error(f"{who}: indices must be integers; got dtype {idx.dtype}")
    ix.check_range(idx, weight.shape[0], who)
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
    m, (v, d), dt = flat.size, weight.shape, str(weight.dtype)
    w = K.ones((m,), weight.dtype) if psw is None else contiguous(psw.data).reshape(-1)
    out = np.empty((offs.size - 1, d), weight.dtype)
    arg = np.empty(out.shape, np.int32)  # max: each column's position (read by the backward)
    launch(K.kernel(embedding_bag_fwd, mode=mode, dtype=dt), weight.data, flat, offs, w,
           out, arg)

    def bwd(g):
        g, gw, gp = contiguous(g), None, None
        bag = ix.bag_of(offs, m)
        if weight.requires_grad:
            order, starts = ix.sort_plan(flat, v)
            gw = np.empty(weight.shape, weight.dtype)  # every row written (0 if unused)
            launch(K.kernel(embedding_bag_bwd, mode=mode, dtype=dt), g, order, starts,
                   bag, offs, w, arg, gw)
        if psw is not None and psw.requires_grad:
            gp = np.empty(m, weight.dtype)
            launch(K.kernel(embedding_bag_psw_grad, dtype=dt), weight.data, flat, bag, g, gp)
            gp = gp.reshape(psw.shape)
        return (gw,) if psw is None else (gw, gp)
    parents = (weight,) if psw is None else (weight, psw)
    return record(out, parents, bwd, f"embedding_bag_{mode}")
