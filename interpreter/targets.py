"""Element sets of an array, addressable the same way in any array of that shape.

A `Target` names which elements a load or store touches (a numpy key, or tiles of a
sliding-window view), so the data, the written-flags and the race record are indexed
identically. It knows nothing about buffers, dtypes or blocks.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class Key:
    """`arr[key]`: basic or advanced numpy indexing."""

    def __init__(self, key):
        self.key = key

    def get(self, arr: np.ndarray) -> np.ndarray:
        return arr[self.key]

    def set(self, arr: np.ndarray, values) -> None:
        arr[self.key] = values

    def shape_in(self, arr: np.ndarray) -> tuple[int, ...]:
        return arr[self.key].shape

    def flat_index(self, shape) -> np.ndarray:
        return np.arange(int(np.prod(shape))).reshape(shape)[self.key]

    def disjoint(self) -> bool:
        """Whether the key can name an element twice: unknown for arrays, so False."""
        return all(isinstance(k, (int, slice)) for k in
                   (self.key if isinstance(self.key, tuple) else (self.key,)))


class Windows:
    """Tiles of `window` shape (over the trailing axes) starting at `starts`:
    `sliding_window_view(arr, window)[starts]`, shape `starts' shape + window`.

    `lead` leading axes are indexed directly (not windowed), e.g. the batch axis."""

    def __init__(self, window: tuple[int, ...], starts: tuple, lead: int = 0):
        self.window = window
        self.starts = starts
        self.lead = lead

    def _view(self, arr: np.ndarray, writeable: bool) -> np.ndarray:
        axes = tuple(range(self.lead, arr.ndim))
        return sliding_window_view(_raw(arr), self.window, axis=axes, writeable=writeable)

    def get(self, arr: np.ndarray) -> np.ndarray:
        slab = self._slab(arr)
        if slab is not None:
            return slab
        out = self._view(arr, False)[self.starts]
        return out if out.dtype == arr.dtype else out.view(arr.dtype)

    def set(self, arr: np.ndarray, values) -> None:
        slab = self._slab(arr)
        if slab is not None:
            slab[...] = values
            return
        values = np.asarray(values, dtype=arr.dtype)
        self._view(arr, True)[self.starts] = _raw(values)

    def _slab(self, arr: np.ndarray) -> np.ndarray | None:
        """The tiles as one reshaped slice of `arr` (a view), when each tile is contiguous
        and the tiles follow each other in memory in order (row tiles, vector tiles)."""
        w = self.window
        if self.lead or not arr.flags.c_contiguous or not w:
            return None
        first = next((d for d, x in enumerate(w) if x != 1), len(w))
        if any(w[d] != arr.shape[d] for d in range(first + 1, len(w))):
            return None
        size = int(np.prod(w))
        strides = np.cumprod((1,) + arr.shape[:0:-1])[::-1]
        st = np.broadcast_arrays(*[np.asarray(x).reshape(-1) for x in self.starts])
        flat = sum(np.asarray(x, dtype=np.int64) * int(k) for x, k in zip(st, strides))
        if flat.ndim != 1 or (flat.size > 1 and np.any(np.diff(flat) != size)):
            return None
        off = int(flat[0]) if flat.size else 0
        return arr.reshape(-1)[off:off + flat.size * size].reshape((flat.size,) + w)

    def shape_in(self, arr: np.ndarray) -> tuple[int, ...]:
        """The shape `get(arr)` has, without gathering."""
        return np.broadcast_shapes(*[np.shape(s) for s in self.starts]) + self.window

    def flat_index(self, shape) -> np.ndarray:
        return self.get(np.arange(int(np.prod(shape))).reshape(shape))

    def disjoint(self) -> bool:
        """Whether no element is in two of the tiles: starts on one grid of the window
        (per dimension, differences are multiples of the window) and all distinct."""
        st = [np.asarray(s).reshape(-1) for s in self.starts[self.lead:]]
        if not st or st[0].size <= 1:
            return True
        for s, w in zip(st, self.window):
            if np.any((s - s[0]) % w):
                return False
        rows = np.stack(np.broadcast_arrays(*st), axis=1)
        return len(np.unique(rows, axis=0)) == len(rows)


def _raw(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays as same-width unsigned ints: numpy's stride tricks cannot rebuild
    some of their dtypes (float8_e5m2 reads back as an unknown '<f1')."""
    return a if a.dtype.isbuiltin == 1 else a.view(f"u{a.dtype.itemsize}")  # 2: user dtype
