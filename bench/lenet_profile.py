"""Per-op profile of LeNet-5's training step (batch 64, 8x8 digits variant, SGD): tilepy's
kernel launches keyed by kernel and array shapes, beside torch.profiler's per-op table of
torch's step, both on one thread and in CPU time. Not a test; torch is optional.

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/lenet_profile.py
        [--steps 200] [--fast] [--no-torch]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_bench as tb  # noqa: E402

from tilepy.models.kernels import launch as L  # noqa: E402


def tilepy_table(steps: int, fast: bool) -> tuple:
    """({(kernel, shapes): [calls, cpu s]}, cpu s per step) over `steps` steps."""
    step = tb.tilepy_runner(tb.lenet5, tb.SHAPES["lenet"], fast=fast)
    for _ in range(10):
        step()
    rec: dict = defaultdict(lambda: [0, 0.0])
    inner = L._launch

    def timed(kernel, arrays):
        t0 = time.process_time()
        inner(kernel, arrays)
        e = rec[(kernel.func.name, " ".join("x".join(map(str, a.shape)) for a in arrays))]
        e[0] += 1
        e[1] += time.process_time() - t0
    L._launch = timed
    try:
        c0 = time.process_time()
        for _ in range(steps):
            step()
        total = (time.process_time() - c0) / steps
    finally:
        L._launch = inner
    return rec, total


def torch_table(steps: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    step = tb.torch_runner("lenet", tb.SHAPES["lenet"])
    for _ in range(20):
        step()
    c0 = time.process_time()
    for _ in range(steps):
        step()
    print(f"\ntorch {torch.__version__}, one thread: {(time.process_time() - c0) / steps * 1e3:.3f}"
          " ms CPU a step (unprofiled)")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    print(prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total", row_limit=60, max_name_column_width=40,
        max_shapes_column_width=60))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    rec, total = tilepy_table(args.steps, args.fast)
    n, kernels = args.steps, sum(v[1] for v in rec.values())
    print(f"tilepy {'fast' if args.fast else 'exact'}: {total * 1e3:.3f} ms CPU a step, "
          f"kernels {kernels / n * 1e3:.3f} ms in {sum(v[0] for v in rec.values()) / n:.0f}"
          " launches")
    print(f"{'kernel':16} {'us/step':>8} {'calls':>5}  arrays")
    for (name, shapes), (calls, sec) in sorted(rec.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:16} {sec / n * 1e6:8.1f} {calls / n:5.1f}  {shapes}")
    if not args.no_torch:
        torch_table(args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
