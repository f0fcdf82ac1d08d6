"""Per-launch wall time of a captured training step at one thread against Numba's full
pool, inside the replayed step (bench/train_bench.py's models, batch 64, SGD), with each
launch's grid, largest array and IR flop/byte counts; plus the fixed costs of a thread
switch and of a parallel launch over an empty body. Not a test.

    .venv/bin/python bench/thread_probe.py --model lenet [--fast] [--rounds 15] [--steps 20]

Policies, alternating by rounds in one process: "one" (every launch on one thread),
"all" (every launch on Numba's NUMBA_NUM_THREADS), "now" (launch.py's policy). Each
launch's figure is its minimum over every replayed step of the policy; the step's is
the minimum over rounds of the mean per step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/train_bench.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numba  # noqa: E402
import numpy as np  # noqa: E402
import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.ir.analysis import count  # noqa: E402
from tilepy.ir.stmt import Launch  # noqa: E402
from tilepy.models import nn  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402

F = nn.functional


def captured(kind: str):
    """The replay's graph of a captured SGD step of row `kind`, replaying."""
    return B.replayed_graph(kind)


def unwrap(op) -> tuple:
    """(the launch's own callable or the host operation, whether it is a launch, the
    thread choice launch.py made for it: True, False, or None while measuring)."""
    call, big = op
    owner = getattr(call.func, "__self__", None)
    if isinstance(owner, L._Trial):
        return call.args[0], True, owner.big
    return call, big is not None, big


def describe(call) -> tuple:
    """(kernel name, grid blocks, largest array, flops, global bytes) of a bound launch."""
    blas = callable(call.args[0]) and not isinstance(call.args[0], np.ndarray)
    fn, args = (call.args[0], call.args[1:]) if blas else (call.func, call.args)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    sizes = [int(a) for a in args if not isinstance(a, np.ndarray)]
    kernel = next(k for k, _, compiled in L._PLANS.values()
                  if any(c is not None and c[0] is fn for c in compiled))
    func = kernel.func
    env = {v.name: n for v, n in zip(func.sizes, sizes)}
    grid = next((s for s in func.body if isinstance(s, Launch)), None)
    blocks = 1
    if grid is not None:
        from tilepy.ir.analysis import evaluate
        for g in grid.grid:
            blocks *= int(evaluate(g, env))
    c = count(func, env)
    return (func.name, blocks, max(a.size for a in arrays), sum(c.ops.values()), c.gemm_flops,
            c.global_bytes)


def run_policy(graph, want: list, timings: list | None) -> float:
    """One replayed step with launch i on want[i] threads; per-launch seconds appended."""
    t_step = time.perf_counter()
    for i, op in enumerate(graph.ops):
        call, is_launch, _ = unwrap(op)
        if not is_launch:
            t0 = time.perf_counter()
            call()
            if timings is not None:
                timings[i].append(time.perf_counter() - t0)
            continue
        w = want[i]
        if numba.get_num_threads() != w:
            numba.set_num_threads(w)
            L._THREADS[1] = w
            L._THREADS[2] = None
        t0 = time.perf_counter()
        call()
        if timings is not None:
            timings[i].append(time.perf_counter() - t0)
    graph.result()
    return time.perf_counter() - t_step


def micro(full: int, rounds: int) -> None:
    """Fixed costs: set_num_threads back and forth; an empty prange at 1 and `full`."""
    @numba.njit(parallel=True)
    def empty(a):
        for i in numba.prange(a.size):
            a[i] += 1.0
    a = np.zeros(full * 4)
    empty(a)
    n = 2000
    best = {}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            numba.set_num_threads(1)
            numba.set_num_threads(full)
        best["switch pair"] = min(best.get("switch pair", 1), (time.perf_counter() - t0) / n)
        for t in (1, full):
            numba.set_num_threads(t)
            t0 = time.perf_counter()
            for _ in range(n):
                empty(a)
            k = f"empty prange, {t} thread(s)"
            best[k] = min(best.get(k, 1), (time.perf_counter() - t0) / n)
            # a launch after the pool idled (workers asleep under PASSIVE)
            worst = 0.0
            for _ in range(20):
                time.sleep(0.002)
                t0 = time.perf_counter()
                empty(a)
                worst = max(worst, time.perf_counter() - t0)
            k = f"empty prange after 2 ms idle, {t} thread(s), worst of 20"
            best[k] = min(best.get(k, 1), worst)
    numba.set_num_threads(full)
    for k, v in best.items():
        print(f"  {k:58s} {v * 1e6:8.2f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(B.SHAPES), default="lenet")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--micro", action="store_true", help="only the fixed costs")
    args = ap.parse_args()
    full = numba.config.NUMBA_NUM_THREADS
    print(f"threads {full}; load {os.getloadavg()[0]:.2f}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    if args.micro:
        micro(full, args.rounds)
        print(f"threading layer {numba.threading_layer()}")
        return 0
    ctx = tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext()
    with ctx:
        graph = captured(args.model)
        for _ in range(10):  # launch.py's measuring launches end
            L.replay(graph.ops)
        ops = [unwrap(op) for op in graph.ops]
        launches = [i for i, op in enumerate(ops) if op[1]]
        pol = {"one": [1] * len(ops), "all": [full] * len(ops),
               "now": [full if op[2] else 1 for op in ops]}
        times = {k: [[] for _ in graph.ops] for k in pol}
        step = dict.fromkeys(pol, float("inf"))
        names = list(pol)
        for r in range(args.rounds):  # the order rotates: no policy always follows another
            for k in names[r % 3:] + names[:r % 3]:
                want = pol[k]
                t = sum(run_policy(graph, want, times[k]) for _ in range(args.steps))
                step[k] = min(step[k], t / args.steps)
    print(f"threading layer {numba.threading_layer()}")
    print(f"{args.model} {'fast' if args.fast else 'exact'}: {len(launches)} launches "
          "replayed (host operations' own launches not listed); wall us, min over steps")
    print(f"{'#':>3} {'kernel':18} {'blocks':>6} {'largest':>8} {'Mops':>7} {'Mgemm':>6} {'KB':>6} "
          f"{'1 thr':>7} {f'{full} thr':>7} {'ratio':>6} now")
    tot = dict.fromkeys(pol, 0.0)
    for i in launches:
        name, blocks, big, flops, gf, nbytes = describe(ops[i][0])
        one, all_ = min(times["one"][i]), min(times["all"][i])
        for k in pol:
            tot[k] += min(times[k][i])
        print(f"{i:3d} {name[:18]:18} {blocks:6d} {big:8d} {flops / 1e6:7.2f} {gf / 1e6:6.2f} "
              f"{nbytes / 1e3:6.0f} {one * 1e6:7.1f} {all_ * 1e6:7.1f} {all_ / one:6.2f} "
              f"{pol['now'][i]}")
    host = [i for i in range(len(graph.ops)) if i not in launches]
    print("host operations (min us one / all / now): " + ", ".join(
        f"{i} {graph.names[i] or getattr(graph.ops[i][0].func, '__name__', '?')} "
        + "/".join(f"{min(times[k][i]) * 1e6:.1f}" for k in pol) for i in host))
    print("sum of per-launch minima, us: " + ", ".join(f"{k} {v * 1e6:.1f}"
                                                       for k, v in tot.items()))
    print("step wall ms (min over rounds of the mean): " + ", ".join(
        f"{k} {v * 1e3:.3f}" for k, v in step.items()) + f"; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
