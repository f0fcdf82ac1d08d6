"""Packed variable-length sequences (torch.nn.utils.rnn's API and semantics): a
PackedSequence holds the steps of a batch of sequences sorted by decreasing length, time
major, with `batch_sizes[t]` sequences still running at step t. Packing and padding only
move rows (a differentiable gather and scatter); LSTM and GRU take PackedSequence input.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tilepy.models.errors import model_error
from tilepy.models.kernels.record import filled
from tilepy.models.ops import as_tensor, cat, permute, record
from tilepy.models.tensor import Tensor


class PackedSequence(NamedTuple):
    """data (sum of lengths, *), batch_sizes (int64, one per step), sorted_indices (the
    original batch position of each sorted sequence; None when the input was sorted) and
    unsorted_indices (its inverse)."""

    data: Tensor
    batch_sizes: np.ndarray
    sorted_indices: np.ndarray | None = None
    unsorted_indices: np.ndarray | None = None


def gather_rows(x: Tensor, idx: np.ndarray) -> Tensor:
    """x[idx] along the first axis for distinct indices; the backward scatters back. Both
    moves are host fills, which a captured step redoes on replay (idx must then be an
    input of the step or kept across steps)."""
    idx = np.asarray(idx)
    out = filled(_take, np.empty((*idx.shape, *x.shape[1:]), x.dtype), x.data, idx)

    def bwd(g):
        return (filled(_put, np.empty(x.shape, x.dtype), g, idx),)
    return record(out, (x,), bwd, "gather_rows")


def _take(out: np.ndarray, x: np.ndarray, idx: np.ndarray) -> None:
    np.take(x, idx, axis=0, out=out)


def _put(gx: np.ndarray, g: np.ndarray, idx: np.ndarray) -> None:
    gx.fill(0)
    gx[idx] = g  # distinct rows: a move, no arithmetic


def scatter_rows(x: Tensor, idx: np.ndarray, rows: int, fill: float = 0.0) -> Tensor:
    """A (rows, *) array filled with `fill` and x's rows written at the distinct `idx`."""
    out = np.full((rows, *x.shape[1:]), fill, x.dtype)
    out[idx] = x.data

    def bwd(g):
        return (np.ascontiguousarray(g[idx]),)
    return record(out, (x,), bwd, "scatter_rows")


def _lengths(lengths, batch: int, steps: int) -> np.ndarray:
    arr = np.asarray(lengths.data if isinstance(lengths, Tensor) else lengths)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) != batch:
        raise model_error(f"pack_padded_sequence: expected one integer length per sequence "
                          f"({batch}); got {arr.dtype} array of shape {arr.shape}")
    if batch and (arr.min() < 1 or arr.max() > steps):
        raise model_error(f"pack_padded_sequence: lengths must be in [1, {steps}] (the "
                          f"padded length); got {arr.tolist()}",
                          hint="every sequence needs at least one step")
    return arr.astype(np.int64)


def _batch_sizes(sorted_lengths: np.ndarray) -> np.ndarray:
    """How many of the (decreasing) lengths exceed each step t."""
    steps = int(sorted_lengths[0]) if len(sorted_lengths) else 0
    return (sorted_lengths[None, :] > np.arange(steps)[:, None]).sum(axis=1).astype(np.int64)


def packed_index(batch_sizes: np.ndarray, order: np.ndarray, batch: int) -> np.ndarray:
    """The flat (t * batch + order[b]) position in a time-major (T, batch) layout of each
    row of packed data, in packed order."""
    return np.concatenate([t * batch + order[:int(n)] for t, n in enumerate(batch_sizes)])


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (T, B, *) ((B, T, *) with batch_first) of sequences of the given
    lengths. With enforce_sorted the lengths must be decreasing; otherwise the batch is
    sorted here and the order kept in sorted_indices."""
    x = as_tensor(input)
    if x.ndim < 2:
        raise model_error(f"pack_padded_sequence: expected a padded batch of at least 2 "
                          f"dimensions; got shape {x.shape}")
    if batch_first:
        x = permute(x, (1, 0, *range(2, x.ndim)))
    steps, batch = x.shape[:2]
    lens = _lengths(lengths, batch, steps)
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise model_error(f"pack_padded_sequence: lengths {lens.tolist()} are not in "
                              "decreasing order with enforce_sorted=True",
                              hint="sort the batch, or pass enforce_sorted=False")
        order, sorted_idx, unsorted_idx = np.arange(batch), None, None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_idx, unsorted_idx = order.astype(np.int64), np.argsort(order).astype(np.int64)
    sizes = _batch_sizes(lens[order])
    flat = x.reshape((steps * batch, *x.shape[2:]))
    data = gather_rows(flat, packed_index(sizes, order, batch))
    return PackedSequence(data, sizes, sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None):
    """The inverse of pack_padded_sequence: (padded (T, B, *), lengths in the original batch
    order); T is the longest length, or total_length when given."""
    sizes = np.asarray(sequence.batch_sizes)
    steps, batch = len(sizes), int(sizes[0]) if len(sizes) else 0
    if total_length is not None:
        if total_length < steps:
            raise model_error(f"pad_packed_sequence: total_length={total_length} is shorter "
                              f"than the longest sequence ({steps} steps)")
        steps = total_length
    order = (np.arange(batch) if sequence.sorted_indices is None
             else np.asarray(sequence.sorted_indices))
    data = sequence.data
    flat = scatter_rows(data, packed_index(sizes, order, batch), steps * batch, padding_value)
    out = flat.reshape((steps, batch, *data.shape[1:]))
    if batch_first:
        out = permute(out, (1, 0, *range(2, out.ndim)))
    lens = np.zeros(batch, np.int64)
    lens[order] = (sizes[None, :] > np.arange(batch)[:, None]).sum(axis=1)
    return out, lens


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0) -> Tensor:
    """A list of (L_i, *) tensors as one padded (max L, B, *) tensor ((B, max L, *) with
    batch_first), in the given order."""
    seqs = [as_tensor(s) for s in sequences]
    if not seqs:
        raise model_error("pad_sequence: expected at least one sequence")
    lens = np.array([s.shape[0] for s in seqs], np.int64)
    steps, batch = int(lens.max()), len(seqs)
    idx = np.concatenate([np.arange(n) * batch + b for b, n in enumerate(lens)])
    rows = scatter_rows(cat(seqs, dim=0), idx, steps * batch, padding_value)
    out = rows.reshape((steps, batch, *seqs[0].shape[1:]))
    return permute(out, (1, 0, *range(2, out.ndim))) if batch_first else out


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """pack_padded_sequence(pad_sequence(sequences), their lengths, enforce_sorted)."""
    lens = [as_tensor(s).shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lens, enforce_sorted=enforce_sorted)
