"""Error growth of the library's Winograd and Strassen kernels against float64, on fixed
seeds: prints, per kernel and size, the largest error in units of u (2^-24) times the
magnitude a plain product would be charged (conv: sum |x||w| of that output; gemm:
sum |a||b|), the ratio to the direct form's (plain gemm's) error on the same data, and the
largest share of the derived bound (tilepy.kernels.checks) that was used. Exact mode in
the interpreter (the JIT's exact bits); `--fast`: the JIT's fast mode (compiles each conv
shape). docs/conv.md quotes its output:

    .venv/bin/python bench/conv_error.py [--fast]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilepy  # noqa: E402
from tilepy.kernels import checks  # noqa: E402

U = checks.U32


def _scaled(case, out, mag) -> float:
    """max |out - reference| / (u * mag) over the outputs."""
    err = np.abs(np.asarray(out, np.float64) - case.reference)
    return float((err / (U * mag)).max())


def _backend(fast: bool):
    return tilepy.backend("jit", fast=True) if fast else tilepy.backend("interp")


def conv_rows(fast: bool):
    for C in (16, 64, 256):
        seed = 100 + C
        direct = checks.conv_form_case(np.random.default_rng(seed), 2, 16, 16, C, 32, pad=1)
        _, absum = checks.conv_nhwc_reference(*direct.inputs, 1, 1)
        with _backend(fast):
            base = _scaled(direct, direct.kernel(*direct.inputs), absum)
            yield f"conv2d direct C={C}", base, 1.0, direct.error(direct.kernel(*direct.inputs))[1]
            for m in (2, 4):
                case = checks.winograd_case(np.random.default_rng(seed), 2, 16, 16, C, 32, m=m)
                out = case.kernel(*case.inputs)
                e = _scaled(case, out, absum)
                yield f"winograd F({m}x{m},3x3) C={C}", e, e / base, case.error(out)[1]


def strassen_rows(fast: bool):
    for n in (256, 512, 1024):
        base = None
        for levels in range(4):
            case = checks.strassen_case(np.random.default_rng(n), n, n, n, levels)
            a, b = (x.astype(np.float64) for x in case.inputs)
            with _backend(fast):
                out = case.kernel(*case.inputs)
            e = _scaled(case, out, np.abs(a) @ np.abs(b))
            base = base or e
            yield f"strassen n={n} levels={levels}", e, e / base, case.error(out)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="fast mode (default: exact)")
    fast = ap.parse_args().fast
    print(f"mode: {'fast' if fast else 'exact'}")
    print("| kernel | max err / (u sum|x||w|) | x direct / plain gemm | max err / bound |")
    print("|---|---|---|---|")
    for rows in (conv_rows(fast), strassen_rows(fast)):
        for name, e, rel, share in rows:
            print(f"| {name} | {e:.3g} | {rel:.2f} | {share:.2g} |", flush=True)


if __name__ == "__main__":
    main()
