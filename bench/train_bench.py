"""Training-step benchmark: steps/s of an MLP 64-256-256-10, LeNet-5 (8x8 digits variant)
and a transformer block d=64 (batch 64, softmax cross-entropy; SGD with momentum, and
Adam) on tilepy.models (JIT, exact mode) beside PyTorch CPU at the same thread count, with
tilepy's step split into kernel time and the rest (Python: autograd, glue, launch
dispatch). The transformer row: 64 sequences of 16 tokens, one pre-norm block (4 heads,
feed-forward 256, GELU; torch's TransformerEncoderLayer with norm_first=True), the mean
over the tokens, Linear(64, 10).

    .venv/bin/python bench/train_bench.py [--steps 200] [--rounds 5] [--threads 2]
        [--models mlp,lenet,transformer] [--fast] [--capture]

Each side runs SGD with momentum 0.9 and Adam (tilepy.models.optim: one fused kernel
launch per step). Rounds interleave the competitors. The first tilepy step (kernel
compiles or disk-cache loads) is timed separately; then both sides warm up (--warmup
seconds) before the rounds. Each row prints its best round (steps/s and CPU ms per step)
and the median; the ratio is best against best.
`--fast` runs tilepy's steps inside `tilepy.backend("jit", fast=True)` (the opt-in fast
mode: FMA contraction, BLAS gemm tiles; checked against the interpreter with error
bounds, not bitwise).
PyTorch runs in worker processes of its own (this file with --torch-worker), idle while
tilepy runs and the other way round. tilepy's process sets OMP_WAIT_POLICY=PASSIVE (Numba's
idle OpenMP pool must not spin), which in one process would govern torch's pool too. Which
policy suits torch depends on the load (spinning wins on a quiet machine and loses badly
on a busy one), so by default two torch workers run, one with torch's default policy and
one with PASSIVE (`--torch-policy default|passive` runs one); read torch's better row.
`--tilepy-policy=default` leaves tilepy's process on libgomp's default policy instead.
Not a test; PyTorch is optional.
"""

from __future__ import annotations

import os
import sys

# tilepy's own OpenMP policy must be set before Numba starts its pool: read it here
if "--torch-worker" not in sys.argv and "--tilepy-policy=default" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import capture, nn, optim  # noqa: E402
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


def train_step(make, shape, adam=False):
    """(step(x, y), x, y): a fresh model from `make` (seed 0) and its SGD (momentum 0.9) or
    Adam step on a batch of 64 inputs of `shape`."""
    nn.manual_seed(0)
    model = make()
    opt = (optim.Adam(model.parameters(), 1e-3) if adam
           else optim.SGD(model.parameters(), 0.01, momentum=0.9))

    def body(x, y):
        loss = F.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return (body, *_data(shape))


def replayed_graph(kind: str):
    """The recording of row `kind`'s SGD step, captured and replayed a few times: its
    `.ops` [(callable, big)] and `.names`, for the probes."""
    body, x, y = train_step(MAKERS[kind], SHAPES[kind])
    step = capture(body)
    for _ in range(5):
        step(x, y)
    (graph,) = step._graphs.values()
    return graph


def tilepy_runner(make, shape, adam=False, fast=False, captured=False):
    body, x, y = train_step(make, shape, adam)
    run = capture(body) if captured else body

    def step():
        with tilepy.backend("jit", fast=True) if fast else contextlib.nullcontext():
            run(x, y)
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
    """(steps/s, CPU seconds of this process per step) over n steps."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        step()
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n


def warm(step, seconds):
    """Run `step` for at least `seconds` (and 10 steps): caches, allocators, pools."""
    t0, k = time.perf_counter(), 0
    while k < 10 or time.perf_counter() - t0 < seconds:
        step()
        k += 1


def split(step, n):
    """(steps/s, CPU s per step, s per step in kernels, kernel launches per step)."""
    with profile() as rec:
        r, cpu = rate(step, n)
    return r, cpu, sum(v[1] for v in rec.values()) / n, sum(v[0] for v in rec.values()) / n


def torch_worker(kind, threads, warmup):
    """The --torch-worker process: warm torch SGD and Adam up, then one round of each per
    line `N` read from stdin, answering `sgd_rate sgd_cpu adam_rate adam_cpu`."""
    import torch

    torch.set_num_threads(threads)
    steps = [torch_runner(kind, SHAPES[kind]), torch_runner(kind, SHAPES[kind], adam=True)]
    for fn in steps:
        warm(fn, warmup)
    print("ready", flush=True)
    for line in sys.stdin:
        out = [x for fn in steps for x in rate(fn, int(line))]
        print(" ".join(f"{x:.9g}" for x in out), flush=True)


class TorchSide:
    """Talks to a torch worker process; None of it when torch is not installed."""

    def __init__(self, kind, args, policy):
        import subprocess

        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        if policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        self.tag = "" if args.torch_policy != "both" else f" ({policy})"
        cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", kind,
               "--threads", str(args.torch_threads or args.threads), "--warmup",
               str(args.warmup)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.wait()
            raise ImportError("torch worker did not start")

    def round(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        v = [float(x) for x in self.proc.stdout.readline().split()]
        return {f"torch SGD{self.tag}": (v[0], v[1]), f"torch Adam{self.tag}": (v[2], v[3])}

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def _torch_sides(kind, args):
    try:
        import torch  # noqa: F401
    except ImportError:
        return []
    policies = ("default", "passive") if args.torch_policy == "both" else (args.torch_policy,)
    return [TorchSide(kind, args, p) for p in policies]


def bench(kind, args):
    make, shape = MAKERS[kind], SHAPES[kind]
    step = tilepy_runner(make, shape, fast=args.fast)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    adam = tilepy_runner(make, shape, adam=True, fast=args.fast)
    mine = {"tilepy": step, "tilepy Adam": adam}
    if args.capture:
        mine["tilepy capture"] = tilepy_runner(make, shape, fast=args.fast, captured=True)
        mine["tilepy Adam capture"] = tilepy_runner(make, shape, adam=True, fast=args.fast,
                                                    captured=True)
    for fn in mine.values():
        warm(fn, args.warmup)
    sides = _torch_sides(kind, args)
    rows: dict = {name: [] for name in mine}
    kern: dict = {"tilepy": [], "tilepy capture": []}
    launches = 0
    for _ in range(args.rounds):
        for name, fn in mine.items():
            if name in kern:
                r, cpu, k, launches = split(fn, args.steps)
                kern[name].append(k)
                rows[name].append((r, cpu))
            else:
                rows[name].append(rate(fn, args.steps))
        for side in sides:
            for name, v in side.round(args.steps).items():
                rows.setdefault(name, []).append(v)
    for side in sides:
        side.close()
    best = {k: max(v) for k, v in rows.items()}
    med = {k: statistics.median(r for r, _ in v) for k, v in rows.items()}
    print(f"\n{kind} batch 64: first step {first:.2f} s (compiles or cache loads)")
    for name, ks in kern.items():
        if not ks:
            continue
        per_step, k = 1.0 / best[name][0], min(ks)
        label = "tilepy SGD" + name[6:]
        print(f"  {label:18s} best {best[name][0]:8.1f} steps/s (median {med[name]:.1f}; "
              f"{per_step * 1e3:.3f} ms/step: kernels {k * 1e3:.3f} ms in {launches:.0f} "
              f"launches, the rest {(per_step - k) * 1e3:.3f} ms Python)")
    for name in rows:
        if name not in kern:
            r, cpu = best[name]
            vs = f"tilepy SGD / it = {best['tilepy'][0] / r:.2f}x"
            if "tilepy capture" in best:
                vs += f", captured {best['tilepy capture'][0] / r:.2f}x"
            print(f"  {name:18s} best {r:8.1f} steps/s (median {med[name]:.1f}; CPU "
                  f"{cpu * 1e3:.3f} ms/step)  {vs}")


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
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds of warm-up steps per competitor before the rounds")
    ap.add_argument("--torch-policy", choices=("both", "default", "passive"), default="both",
                    help="torch workers' OMP_WAIT_POLICY: one worker with torch's default "
                    "(spinning), one with PASSIVE, or both (the default: read the better)")
    ap.add_argument("--tilepy-policy", choices=("passive", "default"), default="passive",
                    help="tilepy's OMP_WAIT_POLICY (written --tilepy-policy=default): PASSIVE "
                    "(idle Numba workers sleep: each launch on the pool wakes them) or "
                    "libgomp's default (workers spin a while: faster on a quiet machine)")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch's threads, if not --threads (torch's two-thread convolution "
                    "backward is far slower than its one-thread one on a busy machine)")
    ap.add_argument("--capture", action="store_true",
                    help="also run tilepy's steps captured and replayed "
                         "(tilepy.models.capture), as rows of their own beside eager")
    ap.add_argument("--torch-worker", metavar="ROW", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, args.threads, args.warmup)
        return 0
    import numba

    numba.set_num_threads(args.threads)
    print(f"threads: {args.threads} (torch {args.torch_threads or args.threads}); load "
          f"average {os.getloadavg()[0]:.2f}; tilepy {'fast' if args.fast else 'exact'} mode, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (default)')}")
    for kind in args.models.split(","):
        if kind not in SHAPES:
            ap.error(f"unknown row {kind!r}; expected mlp, lenet or transformer")
        bench(kind, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
