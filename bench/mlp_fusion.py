"""The MLP block (gemm + bias + GELU + gemm) as a graph of tile ops, four ways on the JIT in
exact mode: back-to-back fused (one kernel, the intermediate in a block-local tile),
epilogue-only fusion (gemm + bias + GELU, then gemm: two kernels; "wide": the second gemm
at the fused kernel's tiles) and unfused (three).
Each row first checks that all give the same bits, then times them in alternating
rounds (A, B, C, A, B, C ...) in this process and prints the fastest call of each, the
ratio of the fastest calls (min/min) and the median of the per-round ratios. The load
average is printed before and after. Not a test.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/mlp_fusion.py [--tokens 512,2048]
        [--embed 256] [--hidden 1024] [--rounds 30] [--clock cpu|wall]

`--clock cpu` times with time.process_time (this process's CPU time, all its threads);
`wall` with time.perf_counter.
"""

# ruff: noqa: F821  (i, j are the outputs' index names: free in a tile op body by design)

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tileop_bench import bias_gelu, matmul  # noqa: E402 - the same two tile ops

import tilepy  # noqa: E402
from tilepy import tile_op  # noqa: E402
from tilepy.tileop.passes import fuse_epilogues, fuse_producers  # noqa: E402

# the second gemm at the fused kernel's tiles (64 rows, all 256 columns, k steps of 64):
# part of the fused kernel's gain is these tiles, which this form has without fusion
matmul_wide = tile_op(matmul.fn, tiles={"i": 64, "j": 256, "k": 64})


def mlp(x, w1, b1, w2):
    return matmul(bias_gelu(matmul(x, w1), b1), w2)


def mlp_wide(x, w1, b1, w2):
    return matmul_wide(bias_gelu(matmul(x, w1), b1), w2)


FORMS = {
    "fused": tilepy.compile(mlp),
    "2 kernels": tilepy.compile(mlp, passes=(fuse_epilogues, fuse_producers)),
    "2 kernels, wide": tilepy.compile(mlp_wide, passes=(fuse_epilogues, fuse_producers)),
    "unfused": tilepy.compile(mlp, fuse=False),
}


def row(tokens: int, embed: int, hidden: int, rounds: int, clock) -> None:
    r = np.random.default_rng(tokens)
    f32 = np.float32
    args = (r.standard_normal((tokens, embed)).astype(f32),
            (r.standard_normal((embed, hidden)) / math.sqrt(embed)).astype(f32),
            r.standard_normal(hidden).astype(f32),
            (r.standard_normal((hidden, embed)) / math.sqrt(hidden)).astype(f32))
    outs = {name: f(*args) for name, f in FORMS.items()}  # compiles, then checks
    bits = {o.tobytes() for o in outs.values()}
    kernels = {name: len(f.trace(*args).nodes) for name, f in FORMS.items()}
    times: dict[str, list[float]] = {name: [] for name in FORMS}
    for _ in range(rounds):
        for name, f in FORMS.items():
            t = clock()
            f(*args)
            times[name].append(clock() - t)
    inter = tokens * hidden * 4 / 2**20
    print(f"{tokens}x{embed} -> {hidden} -> {embed} (intermediate {inter:.0f} MiB), "
          f"{'same bits' if len(bits) == 1 else 'BITS DIFFER'}, kernels "
          + ", ".join(f"{n}: {k}" for n, k in kernels.items()))
    best = {n: min(t) for n, t in times.items()}
    print("   fastest call: " + ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in best.items()))
    for other in ("unfused", "2 kernels", "2 kernels, wide"):
        per_round = [a / b for a, b in zip(times["fused"], times[other])]
        print(f"   fused / {other}: min/min {best['fused'] / best[other]:.3f}, median of "
              f"per-round ratios {statistics.median(per_round):.3f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="512,2048")
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    o = p.parse_args()
    clock = time.process_time if o.clock == "cpu" else time.perf_counter
    threads = os.environ.get("NUMBA_NUM_THREADS", "default")
    print(f"load {os.getloadavg()[0]:.1f}; NUMBA_NUM_THREADS={threads}; clock {o.clock}; "
          f"{o.rounds} rounds")
    for tokens in (int(t) for t in o.tokens.split(",")):
        row(tokens, o.embed, o.hidden, o.rounds, clock)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
