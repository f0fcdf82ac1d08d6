"""Eager against captured training steps (tilepy.models.capture): per-step CPU time of
this process, alternating rounds in one process, the minimum of each. Run it on one
thread to judge the Python a replay saves:

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/capture_ab.py \\
        --model mlp [--fast] [--adam] [--rounds 9] [--steps 40]

The models are bench/train_bench.py's (batch 64, SGD with momentum or Adam). Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import capture  # noqa: E402


def make(kind: str, adam: bool):
    """(step(x, y), x, y) for a fresh model of row `kind`."""
    return B.train_step(B.MAKERS[kind], B.SHAPES[kind], adam)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(B.SHAPES), default="mlp")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--adam", action="store_true")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=0, help="steps a round (0: 40 for the "
                    "MLP, 15 otherwise)")
    args = ap.parse_args()
    n = args.steps or (40 if args.model == "mlp" else 15)
    eager, x, y = make(args.model, args.adam)
    captured = capture(make(args.model, args.adam)[0])
    steps = {"eager": eager, "captured": captured}
    best = dict.fromkeys(steps, float("inf"))
    ctx = tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext()
    with ctx:
        for fn in steps.values():
            for _ in range(5):
                fn(x, y)
        for _ in range(args.rounds):
            for name, fn in steps.items():
                c0 = time.process_time()
                for _ in range(n):
                    fn(x, y)
                best[name] = min(best[name], (time.process_time() - c0) / n)
    print(f"{args.model} {'fast' if args.fast else 'exact'} {'Adam' if args.adam else 'SGD'}: "
          + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in best.items())
          + f" ms/step CPU (min of {args.rounds} rounds of {n}; {captured.replays} replays)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
