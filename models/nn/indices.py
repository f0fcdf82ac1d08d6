"""The index arrays of the embedding ops (nn.functional.embedding, embedding_bag): the
indices as flat int32, their range check and the sort of positions by index that the
gradient kernels read. Each is made so that a captured step redoes it on every replay: a
recorded copy, a host operation (the check) and a host fill (the sort) of fixed shape.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.errors import model_error
from tilepy.models.kernels.record import astype, contiguous, filled, host_op

_INT32 = np.dtype(np.int32)


def flat_int32(idx: np.ndarray) -> np.ndarray:
    """idx as a flat C-contiguous int32 array (idx's memory when it is one already)."""
    return contiguous(astype(idx, _INT32)).reshape(-1)


@host_op  # a captured step checks each call's indices
def check_range(idx: np.ndarray, v: int, who: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= v):
        raise model_error(f"{who}: indices must lie in [0, {v}); got values from "
                          f"{idx.min()} to {idx.max()}")


def sort_plan(flat: np.ndarray, v: int) -> tuple:
    """(order, starts) of int32 indices in [0, v): order lists the positions sorted by
    index (ascending positions within an index), and the positions of index u are
    order[starts[u]:starts[u + 1]] (starts has v + 1 entries: every index, occurring or
    not, so the shapes do not depend on the data)."""
    plan = filled(_sort, np.empty(flat.size + v + 1, np.int32), flat)
    return plan[:flat.size], plan[flat.size:]


def _sort(plan: np.ndarray, flat: np.ndarray) -> None:
    m = flat.size
    plan[:m] = np.argsort(flat, kind="stable")
    plan[m] = 0
    np.cumsum(np.bincount(flat, minlength=plan.size - m - 1), out=plan[m + 1:])


def bag_of(offs: np.ndarray, m: int) -> np.ndarray:
    """(m,) int32: the bag of each of m positions, from bags + 1 int32 offsets."""
    return filled(_bags, np.empty(m, np.int32), offs)


def _bags(bag: np.ndarray, offs: np.ndarray) -> None:
    bag[:] = np.repeat(np.arange(offs.size - 1, dtype=np.int32), np.diff(offs))
