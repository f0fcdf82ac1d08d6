"""Running a kernel from an autograd op: on the JIT (exact or fast mode) straight into the
compiled function, skipping the per-call argument checks of `Kernel.__call__` (the op built the
arrays itself: dtypes, shapes and contiguity are right by construction); on any other
backend through `tilepy.backend.run`, with everything the backend checks.

How many of Numba's threads a launch gets is measured, per launch signature (kernel, mode,
sizes): waking Numba's pool costs about as much as a small kernel's work, and whether the
second thread pays depends on the kernel's blocks and work, not on its arrays' size.
Launches whose largest array is under FLOOR elements, or with one block, run on one thread.
The first 2 * TRIALS launches of any other signature alternate one thread and the full pool,
timed, and later ones keep the faster (the pool only if under MARGIN of one thread's time
and MIN_GAIN faster), timing both again at geometrically spaced launches. `set_grain` pins
a kernel to the pool from a size on. With `MEASURE = False` the old rule holds: the pool
from GRAIN elements on. Exact-mode results do not depend on the thread count (each block's
work is fixed), so the choice changes no bit.

In fast mode BLAS always runs on one thread: a launch that is one whole product cuts it into
panels over Numba's threads (jit/blas.py gemm_par), so its thread count is measured like any
other launch's, and BLAS calls inside blocks have a CPU each. (OpenBLAS's own pool spinning
beside Numba's made an MLP step's gemms 150x slower on a loaded machine: docs/perf-log.md.)
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections import defaultdict

import numpy as np

from tilepy.backend import _current, current, run
from tilepy.ir.expr import Var
from tilepy.models.kernels import record as hooks

# _current (the backend context) is read directly on every launch: current() also
# consults the environment each time.

_PLANS: dict[int, tuple] = {}  # id(kernel) -> (kernel, [(param, dim) per size], compiled)
GRAIN = 1 << 17  # with MEASURE off: launches with an array this large use the pool
MEASURE = True  # choose each launch signature's thread count by timing it (docstring)
FLOOR = 1 << 14  # launches whose largest array is smaller run on one thread, untimed
TRIALS = 4  # timed launches at each thread count before a signature's choice
MARGIN = 0.9  # the pool is chosen when its best time is under MARGIN x one thread's
MIN_GAIN = 5e-6  # and saves at least this many seconds a launch
# [threads Numba had at our first launch, threads set now, whether the last launch was big,
#  the setter of Numba's thread count for this thread]
_THREADS = [0, 0, None, None]
_CHOICES: dict[tuple, object] = {}  # (id(kernel), fast, *sizes) -> its _Trial, or False
_clock = time.perf_counter
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
    return fn, arrays, sizes, blas, _mode(kernel, fast, arrays, sizes)


def _mode(kernel, fast: bool, arrays, sizes) -> object:
    """Whether a JIT launch uses Numba's pool: True or False, or the _Trial that decides."""
    largest = 0
    for a in arrays:
        if a.size > largest:
            largest = a.size
    if _GRAINS and id(kernel) in _GRAINS:
        return largest >= _GRAINS[id(kernel)][1]
    if not MEASURE:
        return largest >= GRAIN
    if largest < FLOOR:
        return False
    if not _THREADS[0]:
        _init_threads()
    if _THREADS[0] < 2:
        return False
    key = (id(kernel), fast, *sizes)
    choice = _CHOICES.get(key)
    if choice is None:
        # a grid of one block has nothing to share: one thread, untimed
        choice = _CHOICES[key] = _Trial() if _blocks(kernel.func, sizes) != 1 else False
    return choice


def _blocks(func, sizes) -> int | None:
    """The number of blocks of `func`'s outermost launch at these sizes (None: unknown)."""
    from tilepy.ir.analysis import evaluate
    from tilepy.ir.stmt import Launch

    env = {v.name: n for v, n in zip(func.sizes, sizes)}
    for st in func.body:
        if isinstance(st, Launch):
            try:
                return math.prod(int(evaluate(g, env)) for g in st.grid)
            except Exception:  # an extent this evaluation cannot know: measure instead
                return None
    return None


class _Trial:
    """A measured launch signature. Its first launch runs on one thread untimed (first-touch
    costs); the next 2 * TRIALS alternate the pool and one thread, timed; then it runs on
    the faster, timing one launch on each count again after about twice as many launches
    as before (the load of a shared machine comes and goes: the best time of each count
    seen so far decides)."""

    __slots__ = ("n", "best", "big", "next")

    def __init__(self):
        self.n, self.best, self.big, self.next = -1, [float("inf")] * 2, False, 0

    def run(self, call, *args) -> None:
        """call(*args) on the thread count chosen, or on the next timed launch's."""
        n = self.n = self.n + 1
        if 2 * TRIALS < n < self.next:  # between checks: the choice
            if self.big is not _THREADS[2]:
                _threads(self.big)
            call(*args)
            return
        big = n % 2 == 1
        if big is not _THREADS[2]:
            _threads(big)
        t0 = _clock()
        call(*args)
        dt = _clock() - t0
        if n and dt < self.best[big]:
            self.best[big] = dt
        if not big and n >= 2 * TRIALS:  # the trials' or a check's last launch
            one, pool = self.best
            self.big = pool < MARGIN * one and one - pool >= MIN_GAIN
            self.next = 2 * n + 1


def _launch(kernel, arrays) -> None:
    fn, arrays, sizes, blas, big = _resolve(kernel, arrays)
    if fn is None:
        func = kernel.func
        run(func, {p.name: a for p, a in zip(func.params, arrays)},
            {v.name: n for v, n in zip(func.sizes, sizes)})
        return
    if big.__class__ is _Trial:
        if blas:
            big.run(blas, fn, *arrays, *sizes)
        else:
            big.run(fn, *arrays, *sizes)
        return
    if big is not _THREADS[2]:
        _threads(big)
    if blas:  # BLAS at one thread for the call (docstring)
        blas(fn, *arrays, *sizes)
    else:
        fn(*arrays, *sizes)


def bound(kernel, arrays) -> tuple:
    """(a no-argument callable that repeats this launch on these arrays under the current
    backend, whether it is big: True/False on the JIT, None elsewhere or for a measured
    launch: the callable then sets its thread count) for replay."""
    fn, arrays, sizes, blas, big = _resolve(kernel, arrays)
    if fn is None:
        return functools.partial(_launch, kernel, tuple(arrays)), None
    if blas:
        call = functools.partial(blas, fn, *arrays, *sizes)
    else:
        call = functools.partial(fn, *arrays, *sizes)
    if big.__class__ is _Trial:
        return functools.partial(big.run, call), None
    return call, big


class Held:
    """launch(kernel, *arrays) repeated on the same arrays (an optimiser's step): bound as
    for replay once per backend, so a repeat skips the per-call resolution. Under a
    recording or profile() it goes through launch()."""

    __slots__ = ("kernel", "arrays", "key", "call", "big")

    def __init__(self, kernel, arrays):
        self.kernel, self.arrays = kernel, tuple(arrays)
        self.key = self.call = self.big = None

    def holds(self, arrays) -> bool:
        """Whether this launch is on these very arrays."""
        return len(arrays) == len(self.arrays) and all(
            a is b for a, b in zip(arrays, self.arrays))

    def __call__(self) -> None:
        if hooks.ACTIVE or _PROFILE:
            launch(self.kernel, *self.arrays)
            return
        chosen = _current.get()
        key = current() if chosen is None else chosen
        if key != self.key:
            self.call, self.big = bound(self.kernel, self.arrays)
            self.key = key
        if self.big is not None and self.big is not _THREADS[2]:
            _threads(self.big)
        self.call()


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
    return ck.fn, views, call_one_thread if fast and ck.blas_in_blocks else None


def _init_threads() -> None:
    """Note Numba's thread count (the pool's size for big launches) and the cheapest
    setter of it: the threading layer's own, when Numba has it (numba.set_num_threads
    checks its argument on every call: docs/models.md "LeNet at two threads")."""
    import numba
    from numba.np.ufunc import parallel

    _THREADS[0] = _THREADS[1] = numba.get_num_threads()  # starts the threading layer
    setter = getattr(parallel, "_set_num_threads", None)
    _THREADS[3] = setter if callable(setter) else numba.set_num_threads


def _threads(big: bool) -> None:
    """One thread for a small launch, Numba's full pool for a big one (set only on change)."""
    if not _THREADS[0]:
        _init_threads()
    _THREADS[2] = big
    want = _THREADS[0] if big else 1
    if want != _THREADS[1]:
        _THREADS[3](want)
        _THREADS[1] = want
