"""The run-time side of bounds checks: the fault record, the check helpers the generated code
calls, and the error the launch raises (which accesses get checks: bounds.py). A failed
check records a fault (a prange worker cannot raise) and keeps the block inside memory: a
local index is clipped, a global load gives 0, a global store is dropped. After its blocks
the launch raises CompiledBoundsError for the lowest faulting block's first fault.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tilepy.ir.errors import HINT_OOB, KernelAssertionError, Loc, OutOfBoundsError
from tilepy.ir.tileops import ASSERT_HINT, assert_message

FAULT_COLS = 11  # block + 1, site, dimension, index (4), the buffer's shape (4)
MAX_CHECKED_RANK = 4


def _tid():
    """This thread's row in a fault record (the numba tier: Numba's thread id)."""
    return 0


def _fault_rows():
    """Rows of a fault record: one per thread (the numba tier: NUMBA_NUM_THREADS)."""
    return 1


def _record(flt, blk, site, dim, i0, i1, i2, i3, n0, n1, n2, n3):
    """Note a fault in this thread's row (FAULT_COLS), keeping the lowest block's first:
    generated code records instead of raising, as Numba drops or garbles exceptions
    raised on prange worker threads."""
    t = min(_tid(), flt.shape[0] - 1)
    if flt[t, 0] == 0 or blk + 1 < flt[t, 0]:
        flt[t, 0] = blk + 1
        flt[t, 1] = site
        flt[t, 2] = dim
        flt[t, 3] = i0
        flt[t, 4] = i1
        flt[t, 5] = i2
        flt[t, 6] = i3
        flt[t, 7] = n0
        flt[t, 8] = n1
        flt[t, 9] = n2
        flt[t, 10] = n3


def _bad_dim(i, j, k, l, n0, n1, n2, n3):
    """The first dimension whose index lies outside (unused dimensions: 0 of size 1)."""
    if not 0 <= i < n0:
        return 0
    if not 0 <= j < n1:
        return 1
    return 2 if not 0 <= k < n2 else 3


def _fault(flt, blk, site, i, j, k, l, n0, n1, n2, n3):
    _record(flt, blk, site, _bad_dim(i, j, k, l, n0, n1, n2, n3), i, j, k, l, n0, n1, n2, n3)


def _clip(i, n):
    return np.int64(0 if i < 0 else (n - 1 if i >= n else i))


def _ck1(flt, blk, site, i, n0):
    """An element index checked against a local buffer's shape: the index, or (after
    recording the fault) a clipped one so the block stays inside its memory."""
    if 0 <= i < n0:
        return np.int64(i)
    _fault(flt, blk, site, i, 0, 0, 0, n0, 1, 1, 1)
    return _clip(i, n0)


def _ck2(flt, blk, site, i, j, n0, n1):
    if 0 <= i < n0 and 0 <= j < n1:
        return np.int64(i), np.int64(j)
    _fault(flt, blk, site, i, j, 0, 0, n0, n1, 1, 1)
    return _clip(i, n0), _clip(j, n1)


def _ck3(flt, blk, site, i, j, k, n0, n1, n2):
    if 0 <= i < n0 and 0 <= j < n1 and 0 <= k < n2:
        return np.int64(i), np.int64(j), np.int64(k)
    _fault(flt, blk, site, i, j, k, 0, n0, n1, n2, 1)
    return _clip(i, n0), _clip(j, n1), _clip(k, n2)


def _ck4(flt, blk, site, i, j, k, l, n0, n1, n2, n3):
    if 0 <= i < n0 and 0 <= j < n1 and 0 <= k < n2 and 0 <= l < n3:
        return np.int64(i), np.int64(j), np.int64(k), np.int64(l)
    _fault(flt, blk, site, i, j, k, l, n0, n1, n2, n3)
    return _clip(i, n0), _clip(j, n1), _clip(k, n2), _clip(l, n3)


def _gin1(flt, blk, site, a, i):
    """Whether the element a[i] of a global array exists; if not, records the fault (the
    caller then drops the store, or the load gives 0)."""
    if 0 <= i < a.shape[0]:
        return True
    _fault(flt, blk, site, i, 0, 0, 0, a.shape[0], 1, 1, 1)
    return False


def _gin2(flt, blk, site, a, i, j):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]:
        return True
    _fault(flt, blk, site, i, j, 0, 0, a.shape[0], a.shape[1], 1, 1)
    return False


def _gin3(flt, blk, site, a, i, j, k):
    if 0 <= i < a.shape[0] and 0 <= j < a.shape[1] and 0 <= k < a.shape[2]:
        return True
    _fault(flt, blk, site, i, j, k, 0, a.shape[0], a.shape[1], a.shape[2], 1)
    return False


def _gin4(flt, blk, site, a, i, j, k, l):
    if (0 <= i < a.shape[0] and 0 <= j < a.shape[1] and 0 <= k < a.shape[2]
            and 0 <= l < a.shape[3]):
        return True
    _fault(flt, blk, site, i, j, k, l, a.shape[0], a.shape[1], a.shape[2], a.shape[3])
    return False


def _gld1(flt, blk, site, a, i, zero):
    """A global element load: a[i], or (after recording the fault) zero."""
    return a[i] if _gin1(flt, blk, site, a, i) else zero


def _gld2(flt, blk, site, a, i, j, zero):
    return a[i, j] if _gin2(flt, blk, site, a, i, j) else zero


def _gld3(flt, blk, site, a, i, j, k, zero):
    return a[i, j, k] if _gin3(flt, blk, site, a, i, j, k) else zero


def _gld4(flt, blk, site, a, i, j, k, l, zero):
    return a[i, j, k, l] if _gin4(flt, blk, site, a, i, j, k, l) else zero


def _region(flt, blk, site, starts, exts, shape):
    """Whether a tile op's local region lies inside its buffer; if not, records the fault
    as the interpreter reports it (the start, or the size where the region runs past)."""
    for d in range(len(starts)):
        s, n = starts[d], shape[d]
        if s < 0 or s >= n or s + exts[d] > n:
            idx = [starts[k] if k < len(starts) else 0 for k in range(4)]
            dims = [shape[k] if k < len(shape) else 1 for k in range(4)]
            if 0 <= s < n:
                idx[d] = n
            _record(flt, blk, site, d, idx[0], idx[1], idx[2], idx[3],
                    dims[0], dims[1], dims[2], dims[3])
            return False
    return True


def _first_fault(flt):
    """The row holding the lowest faulting block, or -1."""
    best = -1
    for r in range(flt.shape[0]):
        if flt[r, 0] != 0 and (best < 0 or flt[r, 0] < flt[best, 0]):
            best = r
    return best


def _block_text(ngrid, g0, g1, g2, blk1) -> str:
    """`block 3` / `block (1, 2)` for the 1-based linear block id of a fault row."""
    blk, coords = int(blk1) - 1, []
    for g in (int(g0), int(g1), int(g2))[:ngrid]:
        coords.append(blk % g)
        blk //= g
    return (f"block {coords[0]}" if len(coords) == 1
            else f"block ({', '.join(str(c) for c in coords)})")


class CompiledAssertionError(KernelAssertionError):
    """A run-time `assert` that failed in JIT-compiled code (raised after the launch from
    the fault record, for the lowest failing block; the interpreter's message)."""

    def __init__(self, msg, file, line, col, ngrid, g0, g1, g2, blk1, *_row):
        super().__init__(assert_message(_block_text(ngrid, g0, g1, g2, blk1), msg),
                         loc=Loc(file, line, col) if line else None, hint=ASSERT_HINT)


class CompiledBoundsError(OutOfBoundsError):
    """An access outside a buffer in JIT-compiled code (raised after the launch from the
    fault record; the message and hint have the interpreter's form)."""

    def __init__(self, what, name, rank, file, line, col, ngrid, g0, g1, g2,
                 blk1, site, dim, i0, i1, i2, i3, n0, n1, n2, n3):
        g0, g1, g2, blk1, dim, i0, i1, i2, i3, n0, n1, n2, n3 = (int(x) for x in (
            g0, g1, g2, blk1, dim, i0, i1, i2, i3, n0, n1, n2, n3))  # numpy ints print oddly
        grid, blk = (g0, g1, g2)[:ngrid], blk1 - 1
        coords = []
        for g in grid:
            coords.append(blk % g)
            blk //= g
        block = (f"block {coords[0]}" if len(coords) == 1
                 else f"block ({', '.join(str(c) for c in coords)})")
        index = (i0, i1, i2, i3)[:rank]
        shape = (n0, n1, n2, n3)[:rank]
        n = shape[dim]
        super().__init__(
            f"{block}: out-of-bounds {what} of {name}[{', '.join(str(i) for i in index)}]: "
            f"expected 0 <= index < {n} in dimension {dim} of {name} (shape {shape}); "
            f"got {index[dim]}",
            loc=Loc(file, line, col) if line else None,
            hint=HINT_OOB)


HELPERS = {f.__name__: f for f in (
    _record, _bad_dim, _fault, _clip, _ck1, _ck2, _ck3, _ck4, _gin1, _gin2, _gin3, _gin4,
    _gld1, _gld2, _gld3, _gld4, _region, _first_fault, _fault_rows)}


def py_helpers() -> dict:
    """The helpers for the py tier (plain Python; one fault row)."""
    return {**HELPERS, "CompiledBoundsError": CompiledBoundsError,
            "CompiledAssertionError": CompiledAssertionError}


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
    return {**out, "CompiledBoundsError": CompiledBoundsError,
            "CompiledAssertionError": CompiledAssertionError}
