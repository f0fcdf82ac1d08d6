"""Catch rates of tilepy.validate on injected bugs in the captured H200 outputs
(tests/data/gpu): per bug, the share caught among injections above the GPU's natural error
(perturbation rms > 2x the GPU's own error on the touched elements) and among all; the
rate for 1% single low-bit flips; softmax without max-subtraction. Prints a table.
Usage: python bench/validate_catch.py [SEEDS]"""

import glob
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.validate import inject  # noqa: E402
from tilepy.validation import load_case  # noqa: E402
from tilepy.validation.api import prepare  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "gpu")


def checks():
    for path in sorted(glob.glob(os.path.join(DATA, "*.npz"))):
        out, op, inp, cfg = load_case(path)
        check = prepare(op, inp, out.dtype, **cfg)
        yield os.path.basename(path)[:-4], out, inp, check, check(out).exact


def main(seeds: int = 20) -> None:
    bugs = {**inject.BUGS, "flip_low_bits_1pct": inject.flip_low_bits}
    tally = {b: [0, 0, 0, 0] for b in bugs}  # caught above, above, caught all, all
    soft = [0, 0, 0, 0]
    for name, out, inp, check, exact in checks():
        for bug, fn in bugs.items():
            if bug == "scale_row" and out.ndim == 1:
                continue  # a "row" of per-sample losses is a single element
            for seed in range(seeds):
                bad, size = fn(out, exact, np.random.default_rng(seed))
                hit = not check(bad).passed
                t = tally[bug]
                t[2], t[3] = t[2] + hit, t[3] + 1
                if size > 2:
                    t[0], t[1] = t[0] + hit, t[1] + 1
        if name.startswith(("softmax", "triton_softmax")):
            for compute in ("float32", inp["x"].dtype.name):
                bad = inject.softmax_no_max(inp["x"], out.dtype, compute)
                size = inject._above(out, bad, exact, np.ones(out.shape, bool))
                hit = not check(bad).passed
                soft[2], soft[3] = soft[2] + hit, soft[3] + 1
                if size > 2:
                    soft[0], soft[1] = soft[0] + hit, soft[1] + 1
    tally["softmax_no_max (once per case and compute dtype)"] = soft
    print(f"{seeds} seeds per case and bug, {len(glob.glob(os.path.join(DATA, '*.npz')))} cases")
    print("| bug | caught, above natural error | caught, all injections |")
    print("|---|---|---|")
    for bug, (ca, a, c, n) in tally.items():
        ra = f"{ca}/{a} = {100 * ca / a:.1f}%" if a else "none above"
        print(f"| {bug} | {ra} | {c}/{n} = {100 * c / max(n, 1):.1f}% |")


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:]))
