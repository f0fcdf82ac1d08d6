"""Mixed-precision training benchmark: the same MLP 64-256-256-10 trained on scikit-learn's
digits (AdamW, batch 64, same seed and batches) with its Linear layers in float32, bf16,
fp8 (e4m3/e5m2, delayed scaling) and under dynamic precision switching
(precision.switching.PrecisionController, fp8 -> bf16 -> fp32), on the JIT in exact mode.
Prints per configuration: the median step time of each round and the fastest step (the
least disturbed by other jobs; compiles excluded: the first step is timed apart), both
relative to float32, the test accuracy after the last epoch, and the switch log. Rounds
interleave the configurations.

    .venv/bin/python bench/precision_bench.py [--epochs 6] [--rounds 3] [--threads 2]
        [--margin 0]

Not a test. Needs the `data` extra (scikit-learn) for the digits.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tilepy.models import nn, no_grad, optim  # noqa: E402
from tilepy.models.data import DataLoader, datasets  # noqa: E402
from tilepy.models.kernels.launch import profile  # noqa: E402
from tilepy.models.nn.lowp import convert  # noqa: E402
from tilepy.models.zoo import mlp  # noqa: E402
from tilepy.precision.switching import PrecisionController  # noqa: E402

F = nn.functional
CONFIGS = ("fp32", "bf16", "fp8", "switch")


def build(name: str, margin: int = 0):
    nn.manual_seed(0)
    ctl = PrecisionController() if name == "switch" else None
    model = convert(mlp(), ctl if ctl is not None else name, margin=margin)
    return model, optim.AdamW(model.parameters(), lr=3e-3), ctl


def accuracy(model, x, y) -> float:
    model.eval()
    with no_grad():
        pred = np.argmax(model(x).numpy(), axis=1)
    model.train()
    return float(np.mean(pred == y))


def train_epoch(model, opt, loader, times: list, kernel: list) -> None:
    for x, y in loader:
        t0 = time.perf_counter()
        with profile() as p:
            loss = F.cross_entropy(model(x), y.astype(np.int32))
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
        kernel.append(sum(v[1] for v in p.values()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--margin", type=int, default=0, help="fp8 scale margin (2^-margin)")
    args = ap.parse_args()
    import numba

    numba.set_num_threads(args.threads)
    split = datasets.load("digits", seed=0)
    xt, yt = split.test.arrays
    runs = {}
    for name in CONFIGS:  # the first step of each compiles (or loads) its kernels
        model, opt, ctl = build(name)
        x, y = split.train.arrays
        t0 = time.perf_counter()
        train_epoch(model, opt, [(x[:64], y[:64])], [], [])
        print(f"{name}: first step {time.perf_counter() - t0:.1f} s (compiles)")
    for r in range(args.rounds):
        for name in CONFIGS:
            model, opt, ctl = build(name, args.margin)
            loader = DataLoader(split.train, batch_size=64, shuffle=True, seed=r)
            times, kernel = [], []
            for _ in range(args.epochs):
                train_epoch(model, opt, loader, times, kernel)
            rec = runs.setdefault(name, [])
            rec.append((statistics.median(times), statistics.median(kernel),
                        accuracy(model, xt, yt), ctl, min(times), min(kernel)))
    base = [t for t, *_ in runs["fp32"]]
    print(f"\n{args.epochs} epochs x {len(split.train.arrays[0]) // 64 + 1} steps, "
          f"{args.rounds} rounds, {args.threads} threads, fp8 margin {args.margin}")
    print("| config | median step ms (rounds) | min step ms | min kernels ms | vs fp32 "
          "(medians, per round) | min vs fp32 | test acc |")
    print("|---|---|---|---|---|---|---|")
    best = min(r[4] for r in runs["fp32"])
    for name, rec in runs.items():
        ms = ", ".join(f"{t * 1e3:.2f}" for t, *_ in rec)
        lo, klo = min(r[4] for r in rec), min(r[5] for r in rec)
        ratio = ", ".join(f"{t / b:.2f}" for (t, *_), b in zip(rec, base))
        acc = ", ".join(f"{r[2]:.4f}" for r in rec)
        print(f"| {name} | {ms} | {lo * 1e3:.2f} | {klo * 1e3:.2f} | {ratio} | "
              f"{lo / best:.2f} | {acc} |")
    ctl = runs["switch"][-1][3]
    print("\nswitch log (step, layer, from, to):", ctl.switches[:12],
          f"({len(ctl.switches)} switches)")


if __name__ == "__main__":
    main()
