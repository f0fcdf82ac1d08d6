"""Per-launch wall time of a captured training step at one thread against two: which
launches gain from the second thread and which do not. The step is bench/train_bench.py's
(batch 64, SGD with momentum), captured; its recorded operations are replayed under
thread policies that alternate round by round in one process, each operation timed alone:

    .venv/bin/python bench/step_threads.py --model transformer [--fast] [--rounds 30]

Policies: `T1` every launch on one thread; `T2` the launch path's own choice (its big
launches on two threads, the rest on one; BLAS calls always on one); `all2` every launch
on two threads. Prints per launch (in step order) the minimum wall time over the rounds
under each policy, then the whole step's minimum replay time under each. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402

POLICIES = ("T1", "T2", "all2")


def captured_ops(kind: str):
    """(the step's recorded [(callable, big)], launch names) after capture."""
    graph = B.replayed_graph(kind)
    return graph.ops, graph.names


def describe(call, name) -> str:
    """A launch's name and the shapes of its arrays (host operations: their function)."""
    args = getattr(call, "args", ())
    shapes = [a.shape for a in args if isinstance(a, np.ndarray) and a.size > 2]
    if name is None:
        func = getattr(call, "func", call)
        return f"host {getattr(func, '__name__', type(func).__name__)}"
    return f"{name} " + " ".join("x".join(map(str, s)) for s in shapes[:3])


def run(ops, policy: str, times: list | None) -> float:
    """Replay `ops` once under `policy`; per-op seconds into `times`; returns the total."""
    import numba

    current = numba.get_num_threads()
    t_all = time.perf_counter()
    for i, (call, big) in enumerate(ops):
        if big is not None:
            want = 1 if policy == "T1" else 2 if policy == "all2" or big else 1
            want = min(want, numba.config.NUMBA_NUM_THREADS)
            if want != current:
                numba.set_num_threads(want)
                current = want
        if times is None:
            call()
            continue
        t0 = time.perf_counter()
        call()
        times[i] = min(times[i], time.perf_counter() - t0)
    return time.perf_counter() - t_all


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(B.SHAPES), default="transformer")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--min-us", type=float, default=20.0,
                    help="list launches whose T1 time is at least this (us)")
    args = ap.parse_args()
    import numba

    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))  # T2 = T1 on one thread
    L._THREADS[2] = None  # the launch path sets its count again on its next launch
    with tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext():
        ops, names = captured_ops(args.model)
        per = {p: [float("inf")] * len(ops) for p in POLICIES}
        whole = dict.fromkeys(POLICIES, float("inf"))
        for _ in range(args.rounds):
            for p in POLICIES:
                run(ops, p, per[p])
                whole[p] = min(whole[p], run(ops, p, None))
    L._THREADS[2] = None
    print(f"{args.model} {'fast' if args.fast else 'exact'}, load {os.getloadavg()[0]:.2f}; "
          f"us per operation, min of {args.rounds} rounds")
    print(f"{'#':>3} {'operation':58s} {'big':>5} " + " ".join(f"{p:>7}" for p in POLICIES)
          + "  T1/T2")
    sums = dict.fromkeys(POLICIES, 0.0)
    for i, ((call, big), name) in enumerate(zip(ops, names)):
        row = {p: per[p][i] * 1e6 for p in POLICIES}
        for p in POLICIES:
            sums[p] += row[p]
        if row["T1"] >= args.min_us:
            print(f"{i:3d} {describe(call, name)[:58]:58s} {str(big):>5} "
                  + " ".join(f"{row[p]:7.1f}" for p in POLICIES)
                  + f"  {row['T1'] / row['T2']:.2f}")
    print("sum of per-operation minima (ms): "
          + ", ".join(f"{p} {sums[p] / 1e3:.3f}" for p in POLICIES))
    print("whole replay, min (ms): " + ", ".join(f"{p} {whole[p] * 1e3:.3f}"
                                                 for p in POLICIES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
