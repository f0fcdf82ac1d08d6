"""Per-op profile of LeNet-5's training step (batch 64, 8x8 digits variant, SGD): tilepy's
kernel launches keyed by kernel and array shapes, beside torch.profiler's per-op table of
torch's step, both on one thread and in CPU time. Not a test; torch is optional.

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/lenet_profile.py
        [--steps 200] [--fast] [--no-torch] [--ops]

`--ops` times each of LeNet's convolution and pooling ops alone on both sides instead
(one thread, CPU time, minimum over alternating rounds): torch's aten ops against the
tilepy launches that the same op costs (numpy's pads included); torch.profiler's
per-op figures are wall-clock and carry the profiler's own cost.
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


def _best(fns: dict, rounds: int = 9, n: int = 50) -> dict:
    """{name: min us per call over alternating rounds of n calls}, CPU time."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.process_time()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.process_time() - t) / n * 1e6)
    return best


def _tilepy_ops(rng) -> dict:
    import numpy as np

    from tilepy.models import Tensor
    from tilepy.models.nn import functional as F
    from tilepy.models.nn import padded

    def arr(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    x1, w1, b1, w2, b2 = arr(64, 1, 8, 8), arr(6, 1, 5, 5), arr(6), arr(16, 6, 5, 5), arr(16)
    a1, g1, a2, g2 = arr(64, 6, 4, 4), arr(64, 6, 8, 8), arr(64, 6, 4, 4), arr(64, 16, 4, 4)
    r1 = Tensor(arr(64, 6, 8, 8), requires_grad=True)
    r2 = Tensor(arr(64, 16, 4, 4), requires_grad=True)
    p1, p2 = F.max_pool2d(r1, 2), F.max_pool2d(r2, 2)  # their nodes' backward: the pool's
    gp1, gp2 = arr(64, 6, 4, 4), arr(64, 16, 2, 2)
    return {
        "conv1 fwd": lambda: padded.conv(padded.pad(x1, 2), w1, b1, 1, (8, 8)),
        "conv2 fwd": lambda: padded.conv(padded.pad(a1, 2), w2, b2, 1, (4, 4)),
        "conv1 bwd (wgrad)": lambda: F._wgrad(g1, x1, w1.shape, 1, 2, 1),
        "conv2 bwd (dgrad+wgrad)": lambda: (F._dgrad(g2, w2, a2.shape, 1, 2, 1),
                                            F._wgrad(g2, a2, w2.shape, 1, 2, 1)),
        "pool1 fwd": lambda: F.max_pool2d(r1, 2),
        "pool2 fwd": lambda: F.max_pool2d(r2, 2),
        "pool1 bwd": lambda: p1._node.backward(gp1),
        "pool2 bwd": lambda: p2._node.backward(gp2),
        "relu1 fwd": lambda: F.relu(r1),
    }


def _torch_ops(rng) -> dict:
    import torch

    def arr(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype("float32"))
    x1, w1, b1, w2, b2 = arr(64, 1, 8, 8), arr(6, 1, 5, 5), arr(6), arr(16, 6, 5, 5), arr(16)
    a1, g1, a2, g2 = arr(64, 6, 4, 4), arr(64, 6, 8, 8), arr(64, 6, 4, 4), arr(64, 16, 4, 4)
    r1, r2 = arr(64, 6, 8, 8), arr(64, 16, 4, 4)
    (_, i1), (_, i2) = (torch.ops.aten.max_pool2d_with_indices(r, [2, 2]) for r in (r1, r2))
    gp1, gp2 = arr(64, 6, 4, 4), arr(64, 16, 2, 2)
    cb = torch.ops.aten.convolution_backward
    F = torch.nn.functional
    return {
        "conv1 fwd": lambda: F.conv2d(x1, w1, b1, padding=2),
        "conv2 fwd": lambda: F.conv2d(a1, w2, b2, padding=2),
        "conv1 bwd (wgrad)": lambda: cb(g1, x1, w1, [6], [1, 1], [2, 2], [1, 1], False,
                                        [0, 0], 1, [False, True, True]),
        "conv2 bwd (dgrad+wgrad)": lambda: cb(g2, a2, w2, [16], [1, 1], [2, 2], [1, 1],
                                              False, [0, 0], 1, [True, True, True]),
        "pool1 fwd": lambda: torch.ops.aten.max_pool2d_with_indices(r1, [2, 2]),
        "pool2 fwd": lambda: torch.ops.aten.max_pool2d_with_indices(r2, [2, 2]),
        "pool1 bwd": lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            gp1, r1, [2, 2], [2, 2], [0, 0], [1, 1], False, i1),
        "pool2 bwd": lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            gp2, r2, [2, 2], [2, 2], [0, 0], [1, 1], False, i2),
        "relu1 fwd": lambda: torch.relu(r1),
    }


def ops_table() -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    mine, theirs = _tilepy_ops(rng), _torch_ops(rng)
    fns = {**{("tilepy", k): v for k, v in mine.items()},
           **{("torch", k): v for k, v in theirs.items()}}
    for fn in fns.values():
        fn()
    best = _best(fns)
    print(f"{'op (one thread, CPU us)':26} {'tilepy':>8} {'torch':>8} {'ratio':>6}")
    for k in mine:
        a, b = best["tilepy", k], best["torch", k]
        print(f"{k:26} {a:8.1f} {b:8.1f} {a / b:6.2f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--ops", action="store_true")
    args = ap.parse_args()
    if args.ops:
        ops_table()
        return 0
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
