"""A transformer step's pass against the code before it, in one process: two captured
steps of bench/train_bench.py's transformer row, one built with the earlier choices,
replayed in alternating rounds:

    .venv/bin/python bench/tfm_ab.py [--fast] [--rounds 15] [--steps 10] [--pass rows]

`--pass rows` (the fifth pass): before, LayerNorm and the mean over tokens in the default
256-wide row tiles. `--pass heads`: before, the attention's heads split and merged by
copies (reshape, permute, packed_attention) instead of qkv_attention's in-place rows.
`--pass mean`: before, the mean over tokens moves them last by a copy (no mid_sum).
`--pass copies`: heads and mean together.
Prints, per variant, the minimum over the rounds of the CPU time per step at one thread
(`time.process_time`: the work) and of the wall time per step at two threads (one when
NUMBA_NUM_THREADS=1). Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import step_threads as S  # noqa: E402

import tilepy  # noqa: E402
from tilepy.kernels.reductions import row_reduce  # noqa: E402
from tilepy.models import kops  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402
from tilepy.models.kernels import norms  # noqa: E402
from tilepy.models.nn import transformer  # noqa: E402
from tilepy.models.nn.attention import packed_attention  # noqa: E402


def _old_row_reduce2d(x: np.ndarray, kind: str) -> np.ndarray:
    c = kops.compute(x.dtype)
    out = np.empty((x.shape[0],), c)
    kops.launch(kops.kernel(row_reduce, kind=kind, dtype=x.dtype, out_dtype=c),
                kops.contiguous(x), out)
    return kops.convert(out, x.dtype)


def _split_heads(qkv, heads, causal):
    n, length, e3 = qkv.shape
    split = qkv.reshape(n, length, 3, heads, e3 // (3 * heads)).permute(2, 0, 3, 1, 4)
    return packed_attention(split, causal).permute(0, 2, 1, 3).reshape(n, length, e3 // 3)


def before_copies(kind: str, heads: bool, mean: bool) -> list:
    """The captured step's operations with the heads split and merged by copies and/or
    the mean over tokens summed after a transposed copy."""
    in_place, columns = transformer.qkv_attention, kops.MID_SUM_COLUMNS
    if heads:
        transformer.qkv_attention = _split_heads
    if mean:
        kops.MID_SUM_COLUMNS = float("inf")
    try:
        ops, _ = S.captured_ops(kind)
    finally:
        transformer.qkv_attention, kops.MID_SUM_COLUMNS = in_place, columns
    return ops


def before_ops(kind: str) -> list:
    """The captured step's operations as the code before the fifth pass ran them."""
    tiles, reduce2d = norms.tiles, kops.row_reduce2d
    norms.tiles, kops.row_reduce2d = (lambda n, fast: {}), _old_row_reduce2d
    try:
        ops, _ = S.captured_ops(kind)
    finally:
        norms.tiles, kops.row_reduce2d = tiles, reduce2d
    return ops


def per_step(ops, threads: int, steps: int) -> tuple[float, float]:
    """(CPU s, wall s) per replayed step with the launch path at `threads`."""
    L._THREADS[0], L._THREADS[2] = threads, None
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        L.replay(ops)
    return (time.process_time() - c0) / steps, (time.perf_counter() - t0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--pass", dest="which", choices=("rows", "heads", "mean", "copies"),
                    default="rows")
    args = ap.parse_args()
    import numba

    two = min(2, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(two)
    if args.which == "rows":
        before = before_ops
    else:
        heads, mean = args.which in ("heads", "copies"), args.which in ("mean", "copies")
        before = lambda kind: before_copies(kind, heads, mean)  # noqa: E731
    with tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext():
        variants = {"before": before("transformer"),
                    "after": S.captured_ops("transformer")[0]}
        cpu1 = dict.fromkeys(variants, float("inf"))
        wall2 = dict.fromkeys(variants, float("inf"))
        for _ in range(args.rounds):
            for name, ops in variants.items():
                cpu1[name] = min(cpu1[name], per_step(ops, 1, args.steps)[0])
                wall2[name] = min(wall2[name], per_step(ops, two, args.steps)[1])
    L._THREADS[0], L._THREADS[2] = two, None
    mode = "fast" if args.fast else "exact"
    print(f"transformer {mode} ({args.which}), load {os.getloadavg()[0]:.2f}, "
          f"min of {args.rounds} rounds of {args.steps} replayed steps, ms/step:")
    for name in variants:
        print(f"  {name:7s} one thread CPU {cpu1[name] * 1e3:7.3f}   {two} threads wall "
              f"{wall2[name] * 1e3:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
