"""Running a kernel from an autograd op: on the JIT (exact mode) straight into the compiled
function, skipping the per-call argument checks of `Kernel.__call__` (the op built the
arrays itself: dtypes, shapes and contiguity are right by construction); on any other
backend through `tilepy.backend.run`, with everything the backend checks.

Small launches run on one thread (as PyTorch runs ops below its grain size): waking
Numba's pool costs far more than such a kernel's work, and on a busy machine a parallel
launch over a few blocks waits for descheduled workers (0.6 ms instead of 9 us measured
here). Launches whose largest array has at least GRAIN elements use all of Numba's threads.
"""

from __future__ import annotations

import numpy as np

from tilepy.backend import current, run
from tilepy.ir.expr import Var

_SIZES: dict[int, tuple] = {}  # id(func) -> (func, [(param index, dim, size name)])
_COMPILED: dict[int, tuple] = {}  # id(func) -> (func, compiled kernel)
GRAIN = 1 << 17
_THREADS = [0, 0]  # [threads Numba had at our first launch, threads set now]


def _size_slots(func) -> list[tuple[int, int, str]]:
    hit = _SIZES.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    slots, seen = [], set()
    for i, p in enumerate(func.params):
        for d, s in enumerate(p.shape):
            if isinstance(s, Var) and s.name not in seen:
                seen.add(s.name)
                slots.append((i, d, s.name))
    _SIZES[id(func)] = (func, slots)
    return slots


def _compiled(func):
    hit = _COMPILED.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    from tilepy.jit import compile as jit_compile  # the JIT loads lazily (DESIGN.md)

    ck = jit_compile(func)
    _COMPILED[id(func)] = (func, ck)
    return ck


def launch(kernel, *arrays: np.ndarray) -> None:
    """Run `kernel` (a tilepy Kernel) on all its arrays, outputs included, in parameter
    order; outputs are written in place. Symbolic sizes are read from the arrays."""
    func = kernel.func
    sizes = {name: arrays[i].shape[d] for i, d, name in _size_slots(func)}
    name, options = current()
    if name == "jit" and not options:
        ck = _compiled(func)
        _threads(max(a.size for a in arrays) >= GRAIN)
        ck.fn(*arrays, *[sizes[v.name] for v in func.sizes])
        return
    run(func, {p.name: a for p, a in zip(func.params, arrays)}, sizes)


def _threads(big: bool) -> None:
    """One thread for a small launch, Numba's full pool for a big one (set only on change)."""
    import numba

    if not _THREADS[0]:
        _THREADS[0] = _THREADS[1] = numba.get_num_threads()
    want = _THREADS[0] if big else 1
    if want != _THREADS[1]:
        numba.set_num_threads(want)
        _THREADS[1] = want
