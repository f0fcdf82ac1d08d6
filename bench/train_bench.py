"""Training-step benchmark: steps/s of an MLP 64-256-256-10, LeNet-5 (8x8 digits variant)
and a transformer block d=64 (batch 64, softmax cross-entropy; SGD with momentum, and
Adam) on tilepy.models (JIT, exact mode) beside PyTorch CPU at the same thread count, with
tilepy's step split into kernel time and the rest (Python: autograd, glue, launch
dispatch). The transformer row: 64 sequences of 16 tokens, one pre-norm block (4 heads,
feed-forward 256, GELU; torch's TransformerEncoderLayer with norm_first=True), the mean
over the tokens, Linear(64, 10).

    .venv/bin/python bench/train_bench.py [--steps 200] [--rounds 5] [--threads 2]
        [--models mlp,lenet,transformer] [--fast]

Each side runs SGD with momentum 0.9 and Adam (tilepy.models.optim: one fused kernel
launch per step). Rounds interleave the competitors; each prints the
median. The first tilepy step (kernel compiles or disk-cache loads) is timed separately.
`--fast` runs tilepy's steps inside `tilepy.backend("jit", fast=True)` (the opt-in fast
mode: FMA contraction, BLAS gemm tiles; checked against the interpreter with error
bounds, not bitwise), through the backend's checked launch path.
Not a test; PyTorch is optional.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import nn, optim  # noqa: E402
from tilepy.models.kernels.launch import profile  # noqa: E402
from tilepy.models.zoo import lenet5, mlp  # noqa: E402

F = nn.functional
SHAPES = {"mlp": (64,), "lenet": (1, 8, 8), "transformer": (16, 64)}


class BlockClassifier(nn.Module):
    """The transformer row's model: one pre-norm block, mean over tokens, a Linear."""

    def __init__(self):
        super().__init__()
        self.block = nn.TransformerBlock(64, 4, 256, activation="gelu")
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.block(x).mean(1))


MAKERS = {"mlp": lambda: mlp(), "lenet": lenet5, "transformer": BlockClassifier}


def _data(shape, batch=64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, *shape)).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int32))


def tilepy_runner(make, shape, adam=False, fast=False):
    nn.manual_seed(0)
    model = make()
    opt = (optim.Adam(model.parameters(), 1e-3) if adam
           else optim.SGD(model.parameters(), 0.01, momentum=0.9))
    x, y = _data(shape)

    def step():
        with tilepy.backend("jit", fast=True) if fast else contextlib.nullcontext():
            loss = F.cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            opt.step()
    return step


def torch_runner(kind, shape, adam=False):
    import torch

    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
    elif kind == "transformer":
        block = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        head = torch.nn.Linear(64, 10)
        model = torch.nn.ModuleList([block, head])
        forward = lambda x: head(block(x).mean(1))  # noqa: E731
    else:
        t = torch.nn
        model = t.Sequential(t.Conv2d(1, 6, 5, padding=2), t.ReLU(), t.MaxPool2d(2),
                             t.Conv2d(6, 16, 5, padding=2), t.ReLU(), t.MaxPool2d(2),
                             t.Flatten(), t.Linear(64, 120), t.ReLU(), t.Linear(120, 84),
                             t.ReLU(), t.Linear(84, 10))
    opt = (torch.optim.Adam(model.parameters(), 1e-3) if adam
           else torch.optim.SGD(model.parameters(), 0.01, momentum=0.9))
    x, y = (torch.from_numpy(a) for a in _data(shape))
    y = y.long()

    run = forward if kind == "transformer" else model

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(run(x), y).backward()
        opt.step()
    return step


def rate(step, n):
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return n / (time.perf_counter() - t0)


def split(step, n):
    """(steps/s, seconds per step in kernels, kernel launches per step)."""
    with profile() as rec:
        r = rate(step, n)
    return r, sum(v[1] for v in rec.values()) / n, sum(v[0] for v in rec.values()) / n


def bench(kind, args):
    make, shape = MAKERS[kind], SHAPES[kind]
    step = tilepy_runner(make, shape, fast=args.fast)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    adam = tilepy_runner(make, shape, adam=True, fast=args.fast)
    adam()
    others = {}
    try:
        import torch

        torch.set_num_threads(args.threads)
        others = {"torch SGD": torch_runner(kind, shape), "torch Adam":
                  torch_runner(kind, shape, adam=True)}
    except ImportError:
        pass
    others = {"tilepy Adam": adam, **others}
    rows = {"tilepy": [], **{k: [] for k in others}}
    kern, launches = [], 0
    for _ in range(args.rounds):
        r, k, launches = split(step, args.steps)
        rows["tilepy"].append(r)
        kern.append(k)
        for name, fn in others.items():
            rows[name].append(rate(fn, args.steps))
    med = {k: statistics.median(v) for k, v in rows.items()}
    per_step = 1.0 / med["tilepy"]
    k = statistics.median(kern)
    print(f"\n{kind} batch 64: first step {first:.2f} s (compiles or cache loads)")
    print(f"  tilepy SGD    {med['tilepy']:8.1f} steps/s  ({per_step * 1e3:.3f} ms/step: "
          f"kernels {k * 1e3:.3f} ms in {launches:.0f} launches, the rest "
          f"{(per_step - k) * 1e3:.3f} ms Python)")
    for name in others:
        print(f"  {name:13s} {med[name]:8.1f} steps/s  tilepy / it = "
              f"{med['tilepy'] / med[name]:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="mlp,lenet,transformer",
                    help="comma-separated rows: mlp, lenet, transformer")
    ap.add_argument("--lenet", action="store_true", help="(kept: LeNet is in the default)")
    ap.add_argument("--fast", action="store_true",
                    help="tilepy in the JIT's fast mode (FMA, BLAS; not bit-exact)")
    args = ap.parse_args()
    import numba

    numba.set_num_threads(args.threads)
    print(f"threads: {args.threads}; load average {os.getloadavg()[0]:.2f}; tilepy "
          f"{'fast' if args.fast else 'exact'} mode")
    for kind in args.models.split(","):
        if kind not in SHAPES:
            ap.error(f"unknown row {kind!r}; expected mlp, lenet or transformer")
        bench(kind, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
