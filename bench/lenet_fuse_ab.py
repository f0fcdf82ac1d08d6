"""LeNet's step as it runs (Conv2d + ReLU + MaxPool2d fused: F.conv2d_relu_maxpool, what
a Sequential runs; the convs' bias gradients in their weight-gradient launch) against the
base (the three ops: the fusion switched off on the conv layers; the bias gradients by
row_reduce, a launch more, patched in), eager and captured, alternating rounds in one
process, the minimum CPU time of each:

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/lenet_fuse_ab.py \\
        [--fast] [--rounds 40] [--steps 30]

Also asserts that both give the same parameters' bits after the warm-up. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import capture_ab as A  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import capture, kops, nn  # noqa: E402
from tilepy.models.kernels.record import copy_into  # noqa: E402

F, _wgrad = nn.functional, nn.functional._wgrad


def _wgrad_then_row_reduce(g, x, w_shape, stride, pad, groups, db=None):
    """The base's bias gradient: the weight gradient's launch without it, then row_reduce."""
    gw = _wgrad(g, x, w_shape, stride, pad, groups)
    if db is not None:
        copy_into(db, kops.reduce(g, (0, 2, 3), "sum", False))
    return gw


def based(step):
    """`step` run with the base's bias gradient."""
    def run(x, y):
        F._wgrad = _wgrad_then_row_reduce
        try:
            return step(x, y)
        finally:
            F._wgrad = _wgrad
    return run


def make(fused: bool):
    """(step, model, x, y) for LeNet (bench/train_bench.py's) with or without the fusion."""
    nn.manual_seed(0)
    model = A.B.MAKERS["lenet"]()
    if not fused:
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                m.fused_forward = None  # Sequential then runs the three modules
    opt = A.optim.SGD(model.parameters(), 0.01, momentum=0.9)
    x, y = A.B._data(A.B.SHAPES["lenet"])

    def step(x, y):
        loss = A.F.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, model, x, y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    steps, models = {}, {}
    for fused in (False, True):
        tag, wrap = ("now", lambda s: s) if fused else ("base", based)
        step, models[tag], x, y = make(fused)
        steps[f"eager {tag}"] = wrap(step)
        steps[f"captured {tag}"] = wrap(capture(make(fused)[0]))
    best = dict.fromkeys(steps, float("inf"))
    with tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext():
        for fn in steps.values():
            for _ in range(5):
                fn(x, y)
        a, b = ([p.data.tobytes() for p in m.parameters()] for m in models.values())
        assert a == b, "the step's parameters differ from the base's"
        for _ in range(args.rounds):
            for name, fn in steps.items():
                c0 = time.process_time()
                for _ in range(args.steps):
                    fn(x, y)
                best[name] = min(best[name], (time.process_time() - c0) / args.steps)
    print(f"lenet {'fast' if args.fast else 'exact'} SGD: "
          + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in best.items())
          + f" ms/step CPU (min of {args.rounds} rounds of {args.steps})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
