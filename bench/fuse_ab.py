"""The transformer step with LayerNorm's affine map and Linear's bias + GELU in the
normalising / activation launches ("fused") against the separate launches they replace
("unfused": the fused paths switched off), in one process: both steps captured, then
replayed in alternating rounds at one thread:

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/fuse_ab.py \
        [--fast] [--rounds 30] [--steps 5] [--check]

Prints per variant the launches per step, the minimum over the rounds of the CPU time per
replayed step (`time.process_time`), and per kernel name the launches and the sum of
each launch's minimum CPU time. --check first runs 4 eager and 4 captured steps of each
variant and says whether their losses and parameters are bit-identical. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import step_threads as S  # noqa: E402
import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models.capture import capture  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402
from tilepy.models.nn import layers, norm  # noqa: E402


@contextlib.contextmanager
def unfused():
    """The code before the fusion: norms then elementwise affine ops; Linear then GELU."""
    fusable, fused = norm._fusable, layers.Linear.fused_forward
    norm._fusable, layers.Linear.fused_forward = (lambda *a: False), None
    try:
        yield
    finally:
        norm._fusable, layers.Linear.fused_forward = fusable, fused


def variant_ops(fused: bool):
    with contextlib.nullcontext() if fused else unfused():
        return S.captured_ops("transformer")


def losses_and_params(fused: bool) -> list:
    """Losses of 4 eager steps then 4 of a captured step (3 recorded eagerly, 1 replayed),
    and the parameters after them."""
    with contextlib.nullcontext() if fused else unfused():
        body, x, y = B.train_step(B.MAKERS["transformer"], B.SHAPES["transformer"])
        out = [body(x, y).data.copy() for _ in range(4)]
        step = capture(body)
        out += [step(x, y).data.copy() for _ in range(4)]
        model = body.__closure__[body.__code__.co_freevars.index("model")].cell_contents
    return out + [p.data.copy() for p in model.parameters()]


def per_launch(ops, names, rounds: int) -> dict:
    """Per kernel name: [launches, sum of each launch's min CPU seconds]."""
    best = [float("inf")] * len(ops)
    for _ in range(rounds):
        for i, (call, _big) in enumerate(ops):
            t0 = time.process_time()
            for _ in range(5):
                call()
            best[i] = min(best[i], (time.process_time() - t0) / 5)
    out: dict = defaultdict(lambda: [0, 0.0])
    for (call, _big), name, t in zip(ops, names, best):
        key = name if name is not None else "host " + S.describe(call, None)[5:]
        out[key][0] += 1
        out[key][1] += t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    with tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext():
        if args.check:
            a, b = losses_and_params(False), losses_and_params(True)
            same = all(np.array_equal(np.atleast_1d(u).view(np.uint8),
                                      np.atleast_1d(v).view(np.uint8)) for u, v in zip(a, b))
            print(f"losses and parameters bit-identical: {same}; losses unfused "
                  f"{[float(v) for v in a[:8]]}\n  fused {[float(v) for v in b[:8]]}")
        variants = {"unfused": variant_ops(False), "fused": variant_ops(True)}
        cpu = dict.fromkeys(variants, float("inf"))
        for _ in range(args.rounds):
            for name, (ops, _) in variants.items():
                c0 = time.process_time()
                for _ in range(args.steps):
                    L.replay(ops)
                cpu[name] = min(cpu[name], (time.process_time() - c0) / args.steps)
        kernels = {name: per_launch(ops, names, max(args.rounds // 3, 5))
                   for name, (ops, names) in variants.items()}
    print(f"transformer {'fast' if args.fast else 'exact'}, load {os.getloadavg()[0]:.2f}, "
          f"threads {os.environ.get('NUMBA_NUM_THREADS', '?')}; min of {args.rounds} "
          f"rounds of {args.steps} replayed steps")
    for name, (_ops, names) in variants.items():
        n = sum(1 for nm in names if nm is not None)
        print(f"  {name:8s} {n:3d} launches/step, CPU {cpu[name] * 1e3:7.3f} ms/step")
    print(f"  {'kernel':24s} {'unfused':>16s} {'fused':>16s}   (launches, sum of min us)")
    for k in sorted(set(kernels["unfused"]) | set(kernels["fused"])):
        cells = [kernels[v].get(k, [0, 0.0]) for v in variants]
        print(f"  {k:24s} " + " ".join(f"{c[0]:4d} {c[1] * 1e6:10.1f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
