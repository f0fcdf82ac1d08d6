"""Running a kernel from an autograd op: on the JIT (exact or fast mode) straight into the
compiled function, skipping the per-call argument checks of `Kernel.__call__` (the op built the
arrays itself: dtypes, shapes and contiguity are right by construction); on any other
backend through `tilepy.backend.run`, with everything the backend checks.

Small launches run on one thread (as PyTorch runs ops below its grain size): waking
Numba's pool costs far more than such a kernel's work, and on a busy machine a parallel
launch over a few blocks waits for descheduled workers (0.6 ms instead of 9 us measured
here). Launches whose largest array has at least GRAIN elements use all of Numba's threads.
In fast mode every launch's BLAS calls run on one thread (OpenBLAS's own pool spinning
beside Numba's made an MLP step's gemms 150x slower on this loaded machine, and a big
launch's gemm tiles already run on Numba's threads: docs/perf-log.md).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict

import numpy as np

from tilepy.backend import _current, current, run
from tilepy.ir.expr import Var
from tilepy.models.kernels import record as hooks

# _current (the backend context) is read directly on every launch: current() also
# consults the environment each time.

_PLANS: dict[int, tuple] = {}  # id(kernel) -> (kernel, [(param, dim) per size], compiled)
GRAIN = 1 << 17
# [threads Numba had at our first launch, threads set now, whether the last launch was big]
_THREADS = [0, 0, None]
_PROFILE: list = []  # the innermost profile() record, when one is active
_FAST = {"fast": True}
_GRAINS: dict[int, tuple] = {}  # id(kernel) -> (kernel, its grain): set_grain's overrides


@contextlib.contextmanager
def profile():
    """Record each kernel's launches and seconds inside the block:
    `with profile() as p: ...` then p[name] == [calls, seconds]."""
    record: dict = defaultdict(lambda: [0, 0.0])
    _PROFILE.append(record)
    try:
        yield record
    finally:
        _PROFILE.remove(record)


@contextlib.contextmanager
def timed(name: str):
    """Record the block as one launch of `name` in the active profile() (for kernels
    launched through a library API rather than launch(): its checks are counted too)."""
    if not _PROFILE:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        entry = _PROFILE[-1][name]
        entry[0] += 1
        entry[1] += time.perf_counter() - t0


def fast_mode() -> bool:
    """Whether launches now run on the JIT's fast mode (tilepy.backend("jit", fast=True))."""
    chosen = _current.get()
    name, options = current() if chosen is None else chosen
    return name == "jit" and options == _FAST


def _plan(kernel) -> tuple:
    """(kernel, where each symbolic size is read: (param index, dim), in the order the
    compiled function takes them, its compiled JIT entries [exact, fast] or None)."""
    hit = _PLANS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit
    func, where = kernel.func, {}
    for i, p in enumerate(func.params):
        for d, s in enumerate(p.shape):
            if isinstance(s, Var):
                where.setdefault(s.name, (i, d))
    plan = (kernel, [where[v.name] for v in func.sizes], [None, None])  # exact, fast
    _PLANS[id(kernel)] = plan
    return plan


def launch(kernel, *arrays: np.ndarray) -> None:
    """Run `kernel` (a tilepy Kernel) on all its arrays, outputs included, in parameter
    order; outputs are written in place. Symbolic sizes are read from the arrays."""
    if hooks.ACTIVE:
        hooks.ACTIVE[-1].launch(kernel, arrays)
    if _PROFILE:
        t0 = time.perf_counter()
        _launch(kernel, arrays)
        entry = _PROFILE[-1][kernel.func.name]
        entry[0] += 1
        entry[1] += time.perf_counter() - t0
    else:
        _launch(kernel, arrays)


def _resolve(kernel, arrays) -> tuple:
    """(fn, arrays as fn takes them, sizes, blas, big) for a JIT launch under the current
    backend; (None, arrays, sizes, None, None) for any other backend."""
    _, where, compiled = _plan(kernel)
    sizes = [arrays[i].shape[d] for i, d in where]
    chosen = _current.get()
    name, options = current() if chosen is None else chosen
    if name != "jit" or (options and options != _FAST):
        return None, arrays, sizes, None, None
    fast = bool(options)
    if compiled[fast] is None:
        compiled[fast] = _compile(kernel, fast)
    fn, views, blas = compiled[fast]
    if views is not None:
        arrays = [a if v is None else a.view(v) for a, v in zip(arrays, views)]
    grain = _GRAINS[id(kernel)][1] if _GRAINS and id(kernel) in _GRAINS else GRAIN
    big = False
    for a in arrays:
        if a.size >= grain:
            big = True
            break
    return fn, arrays, sizes, blas, big


def _launch(kernel, arrays) -> None:
    fn, arrays, sizes, blas, big = _resolve(kernel, arrays)
    if fn is None:
        func = kernel.func
        run(func, {p.name: a for p, a in zip(func.params, arrays)},
            {v.name: n for v, n in zip(func.sizes, sizes)})
        return
    if big != _THREADS[2]:
        _threads(big)
    if blas:  # BLAS on one thread: big launches have Numba's pool (docs/models.md)
        blas(fn, *arrays, *sizes)
    else:
        fn(*arrays, *sizes)


def bound(kernel, arrays) -> tuple:
    """(a no-argument callable that repeats this launch on these arrays under the current
    backend, whether it is big: True/False on the JIT, None elsewhere) for replay."""
    fn, arrays, sizes, blas, big = _resolve(kernel, arrays)
    if fn is None:
        return functools.partial(_launch, kernel, tuple(arrays)), None
    if blas:
        return functools.partial(blas, fn, *arrays, *sizes), big
    return functools.partial(fn, *arrays, *sizes), big


def replay(ops: list) -> None:
    """Run bound launches and host callables [(callable, big or None)] in order, setting
    Numba's thread count before each launch as launch() would."""
    state = _THREADS
    for call, big in ops:
        if big is not None and big is not state[2]:
            _threads(big)
        call()


def replay_profiled(ops: list, names: list) -> None:
    """replay() recording each launch's seconds in the active profile() under its name."""
    for (call, big), name in zip(ops, names):
        if big is not None and big is not _THREADS[2]:
            _threads(big)
        t0 = time.perf_counter()
        call()
        if name is not None:
            entry = _PROFILE[-1][name]
            entry[0] += 1
            entry[1] += time.perf_counter() - t0
def set_grain(kernel, elements: int) -> None:
    """Launches of `kernel` use all of Numba's threads from `elements` (its largest
    array's size) on, instead of GRAIN: for kernels with much work per element."""
    _GRAINS[id(kernel)] = (kernel, elements)


def _compile(kernel, fast: bool) -> tuple:
    """(compiled function, storage views or None, blas.call_one_thread for a fast kernel
    that calls BLAS, else None)."""
    from tilepy.jit import compile as jit_compile  # loads lazily (DESIGN.md)
    from tilepy.jit.blas import call_one_thread

    ck = jit_compile(kernel.func, fast=fast)
    # narrow floats (bf16, fp8) enter Numba as views of their storage integers
    views = ck.views if any(v is not None for v in ck.views) else None
    return ck.fn, views, call_one_thread if fast and "_gemm_acc" in ck.source else None


def _threads(big: bool) -> None:
    """One thread for a small launch, Numba's full pool for a big one (set only on change)."""
    import numba

    if not _THREADS[0]:
        _THREADS[0] = _THREADS[1] = numba.get_num_threads()
    _THREADS[2] = big
    want = _THREADS[0] if big else 1
    if want != _THREADS[1]:
        numba.set_num_threads(want)
        _THREADS[1] = want
