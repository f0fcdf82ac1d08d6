"""`kernel.get_profiler()` and `tilelang.profiler.do_bench`: check a kernel against a
reference program on generated inputs, and time calls in milliseconds as TileLang reports
(wall clock; a kernel's launches are timed by tilepy's profiler, tilepy/profiling).
"""

from __future__ import annotations

import time

import numpy as np

from tilepy.compat.tilelang.utils.tensor import (
    TensorSupplyType,
    make_input,
    torch_assert_close,
)


def do_bench(fn, warmup=25, rep=100, _n_warmup=0, _n_repeat=0, return_mode="mean",
             **_ignored) -> float:
    """Milliseconds of one `fn()` call, TileLang's way: `warmup` and `rep` are time budgets
    in ms (or `_n_warmup` / `_n_repeat` counts) and the mean is returned. When `fn` launches
    tilepy kernels, the time is that of their launches (tilepy's profiler); otherwise the
    wall clock of the whole call. When every launch of the first call ran on the
    interpreter, that call's time is returned without repeats: the reference interpreter
    compiles nothing and caches nothing, so a repeat measures nothing new and a program's
    own benchmark would only multiply its run time."""
    from tilepy.profiling.session import profile

    with profile() as p:
        t0 = time.perf_counter()
        fn()  # the first call compiles
        wall = time.perf_counter() - t0
    first = p.launches
    if first and all(r.backend == "interp" for r in first):
        return sum(r.seconds for r in first) * 1e3
    estimate = max(wall, 1e-6) * 1e3
    n_warm = _n_warmup or max(1, min(int(warmup / estimate), 100))
    n_rep = _n_repeat or max(1, min(int(rep / estimate), 1000))
    for _ in range(n_warm):
        fn()
    times = []
    with profile() as p:
        for _ in range(n_rep):
            start, t0 = len(p.launches), time.perf_counter()
            fn()
            wall = (time.perf_counter() - t0) * 1e3
            launched = p.launches[start:]
            times.append(sum(r.seconds for r in launched) * 1e3 if launched else wall)
    pick = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max}
    return float(pick.get(return_mode, np.mean)(times))


class Profiler:
    """TileLang's profiler of one kernel: inputs from a supply, checks, timings."""

    def __init__(self, kernel, supply=None):
        self.kernel = kernel
        self.supply = supply or TensorSupplyType.Auto

    def _inputs(self, with_output: bool = False):
        func = self.kernel.func
        return [make_input(p, self.supply) for i, p in enumerate(func.params)
                if (with_output or i not in func.out_idx) and i not in func.scratch]

    _get_inputs = _inputs  # TileLang's name, which programs call

    def assert_allclose(self, reference_program, input_tensors=None, atol=1e-2, rtol=1e-2,
                        max_mismatched_ratio=0.01, **_ignored) -> None:
        """Run the kernel and `reference_program` on the same inputs; compare outputs."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        outs = self.kernel(*inputs)
        func = self.kernel.func
        if not func.out_idx:  # outputs written in place: compare the written arguments
            outs = inputs
        ref = reference_program(*inputs)
        outs = outs if isinstance(outs, (tuple, list)) else [outs]
        refs = ref if isinstance(ref, (tuple, list)) else [ref]
        for got, want in zip(outs, refs):
            if want is None:
                continue
            torch_assert_close(got, want, rtol=rtol, atol=atol,
                               max_mismatched_ratio=max_mismatched_ratio)

    def do_bench(self, func=None, warmup=25, rep=100, n_warmup=0, n_repeat=0,
                 input_tensors=None, **_ignored) -> float:
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        target = func or self.kernel
        return do_bench(lambda: target(*inputs), warmup, rep, n_warmup, n_repeat)

    run_once = lambda self, func=None: (func or self.kernel)(*self._inputs())  # noqa: E731

    @property
    def func(self):
        """TileLang's `profiler.func`: the kernel to call (its adapter there)."""
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)
