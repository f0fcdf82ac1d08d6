"""The run-time side of bounds checks on block-local buffers: the fault record, the check
helpers the generated code calls, and the error the launch raises.

A failed check cannot raise inside a prange (Numba drops or garbles exceptions raised on
worker threads), so it records the fault in a per-thread row of a small int64 array,
[block + 1, site, dim, size of dim, i0, i1, i2, i3]; a row keeps its lowest block's first
fault, and the launch raises `LocalBoundsError` for the lowest block after its blocks ran.
Which accesses get checked is jit/bounds.py's business.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tilepy.errors import Loc, OutOfBoundsError

FAULT_COLS = 8
MAX_CHECKED_RANK = 4


def _tid():
    """This thread's row in a fault record (the numba tier: Numba's thread id)."""
    return 0


def _fault_rows():
    """Rows of a fault record: one per thread (the numba tier: NUMBA_NUM_THREADS)."""
    return 1


def _record(flt, blk, site, dim, n, i0, i1, i2, i3):
    t = min(_tid(), flt.shape[0] - 1)
    if flt[t, 0] == 0 or blk + 1 < flt[t, 0]:
        flt[t, 0] = blk + 1
        flt[t, 1] = site
        flt[t, 2] = dim
        flt[t, 3] = n
        flt[t, 4] = i0
        flt[t, 5] = i1
        flt[t, 6] = i2
        flt[t, 7] = i3


def _clip(i, n):
    return np.int64(0 if i < 0 else (n - 1 if i >= n else i))


def _ck1(flt, blk, site, i, n0):
    """An element index checked against a local buffer's shape: the index, or (after
    recording the fault) a clipped one so the block stays inside its memory."""
    if 0 <= i < n0:
        return np.int64(i)
    _record(flt, blk, site, 0, n0, i, 0, 0, 0)
    return _clip(i, n0)


def _ck2(flt, blk, site, i, j, n0, n1):
    if 0 <= i < n0 and 0 <= j < n1:
        return np.int64(i), np.int64(j)
    d = 0 if not 0 <= i < n0 else 1
    _record(flt, blk, site, d, n0 if d == 0 else n1, i, j, 0, 0)
    return _clip(i, n0), _clip(j, n1)


def _ck3(flt, blk, site, i, j, k, n0, n1, n2):
    if 0 <= i < n0 and 0 <= j < n1 and 0 <= k < n2:
        return np.int64(i), np.int64(j), np.int64(k)
    d = 0 if not 0 <= i < n0 else (1 if not 0 <= j < n1 else 2)
    _record(flt, blk, site, d, (n0, n1, n2)[d], i, j, k, 0)
    return _clip(i, n0), _clip(j, n1), _clip(k, n2)


def _ck4(flt, blk, site, i, j, k, l, n0, n1, n2, n3):
    if 0 <= i < n0 and 0 <= j < n1 and 0 <= k < n2 and 0 <= l < n3:
        return np.int64(i), np.int64(j), np.int64(k), np.int64(l)
    d = 0 if not 0 <= i < n0 else (1 if not 0 <= j < n1 else (2 if not 0 <= k < n2 else 3))
    _record(flt, blk, site, d, (n0, n1, n2, n3)[d], i, j, k, l)
    return _clip(i, n0), _clip(j, n1), _clip(k, n2), _clip(l, n3)


def _region(flt, blk, site, starts, exts, shape):
    """Whether a tile op's local region lies inside its buffer; if not, records the fault
    as the interpreter reports it (the start, or the size where the region runs past)."""
    for d in range(len(starts)):
        s, n = starts[d], shape[d]
        if s < 0 or s >= n or s + exts[d] > n:
            idx = [starts[k] if k < len(starts) else 0 for k in range(4)]
            if 0 <= s < n:
                idx[d] = n
            _record(flt, blk, site, d, n, idx[0], idx[1], idx[2], idx[3])
            return False
    return True


def _first_fault(flt):
    """The row holding the lowest faulting block, or -1."""
    best = -1
    for r in range(flt.shape[0]):
        if flt[r, 0] != 0 and (best < 0 or flt[r, 0] < flt[best, 0]):
            best = r
    return best


class LocalBoundsError(OutOfBoundsError):
    """An access outside a block-local buffer in JIT-compiled code (raised after the
    launch from the fault record; the message has the interpreter's form)."""

    def __init__(self, what, name, shape, rank, file, line, col, ngrid, g0, g1, g2,
                 blk1, site, dim, n, i0, i1, i2, i3):
        grid, blk = (g0, g1, g2)[:ngrid], blk1 - 1
        coords = []
        for g in grid:
            coords.append(blk % g)
            blk //= g
        block = (f"block {coords[0]}" if len(coords) == 1
                 else f"block ({', '.join(str(c) for c in coords)})")
        index = (i0, i1, i2, i3)[:rank]
        super().__init__(
            f"{block}: out-of-bounds {what} of {name}[{', '.join(str(i) for i in index)}]: "
            f"expected 0 <= index < {n} in dimension {dim} of {name} (shape {shape}); "
            f"got {index[dim]}",
            loc=Loc(file, line, col) if line else None,
            hint=f"keep indices of {name} (block-local memory) inside its shape; guard "
                 "the access with an `if` on the index")


HELPERS = {f.__name__: f for f in (
    _record, _clip, _ck1, _ck2, _ck3, _ck4, _region, _first_fault, _fault_rows)}


def py_helpers() -> dict:
    """The helpers for the py tier (plain Python; one fault row)."""
    return {**HELPERS, "LocalBoundsError": LocalBoundsError}


@lru_cache(maxsize=None)
def numba_helpers() -> dict:
    """The helpers for the numba tier: njit versions that see each other, one fault row
    per Numba thread."""
    import types

    import numba

    rows = numba.config.NUMBA_NUM_THREADS
    g = dict(globals())
    g["_tid"] = numba.njit(lambda: numba.get_thread_id())
    out = {name: numba.njit(types.FunctionType(fn.__code__, g, name, fn.__defaults__,
                                               fn.__closure__))
           for name, fn in HELPERS.items()}
    out["_fault_rows"] = numba.njit(lambda: rows)
    g.update(out)
    return {**out, "LocalBoundsError": LocalBoundsError}
