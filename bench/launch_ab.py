"""Launch thread policy A/B: a training step (bench/train_bench.py's rows, batch 64, SGD)
under models/kernels/launch.py's measured choice of threads per launch signature against
the array-size rule (`MEASURE = False`: Numba's pool from GRAIN elements on), eager and
captured, each variant its own model, alternating rounds in one process (the order
rotating). Prints wall ms per step (min over rounds of each round's mean), CPU ms, and what
each signature chose. Not a test.

    .venv/bin/python bench/launch_ab.py --model lenet [--fast] [--rounds 15] [--steps 20]

Judge the two-thread question with the wall figures on a quiet machine; the CPU column
shows the second thread's cost.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/train_bench.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import capture_ab  # noqa: E402
import numba  # noqa: E402
import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import capture  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402


def variants(kind: str) -> dict:
    """{(policy, form): (step, x, y)}: a fresh model for each."""
    out = {}
    for policy in ("size", "measure"):
        for form in ("eager", "captured"):
            step, x, y = capture_ab.make(kind, adam=False)
            out[policy, form] = (capture(step) if form == "captured" else step, x, y)
    return out


def choices() -> None:
    """Each measured signature's choice and its best times (us) at one thread / the pool."""
    for key, trial in L._CHOICES.items():
        name = L._PLANS[key[0]][0].func.name
        if not isinstance(trial, L._Trial):
            print(f"  {name:18s} sizes {list(key[2:])}: one thread (one block, unmeasured)")
            continue
        one, pool = (t * 1e6 for t in trial.best)
        print(f"  {name:18s} {'fast' if key[1] else 'exact'} sizes {list(key[2:])}: "
              f"{'pool' if trial.big else 'one thread'} ({one:.1f} / {pool:.1f} us, "
              f"{trial.n + 1} launches)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(B.SHAPES), default="lenet")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    ctx = tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext()
    wall, cpu = {}, {}
    with ctx:
        runs = variants(args.model)
        for (policy, _), (step, x, y) in runs.items():
            L.MEASURE = policy == "measure"
            for _ in range(15):
                step(x, y)
        keys = list(runs)
        for r in range(args.rounds):  # the order rotates: no variant always follows another
            for k in keys[r % 4:] + keys[:r % 4]:
                step, x, y = runs[k]
                L.MEASURE = k[0] == "measure"
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.steps):
                    step(x, y)
                w = (time.perf_counter() - t0) / args.steps
                c = (time.process_time() - c0) / args.steps
                if w < wall.get(k, 1.0):
                    wall[k], cpu[k] = w, c
    print(f"{args.model} {'fast' if args.fast else 'exact'}, {numba.get_num_threads()} / "
          f"{numba.config.NUMBA_NUM_THREADS} threads, load {os.getloadavg()[0]:.2f}; "
          f"wall ms per step (CPU ms), min of {args.rounds} rounds of {args.steps}:")
    for form in ("eager", "captured"):
        a, b = ("size", form), ("measure", form)
        print(f"  {form:8s} size rule {wall[a] * 1e3:.3f} ({cpu[a] * 1e3:.3f})  measured "
              f"{wall[b] * 1e3:.3f} ({cpu[b] * 1e3:.3f})  ratio {wall[b] / wall[a]:.3f}")
    choices()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
