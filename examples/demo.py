"""`make demo`: print a gemm kernel's IR, run every reference kernel in the interpreter,
check each against an independent numpy formulation, and print a table; then run a few of
them through the Numba JIT beside the interpreter (bit-identical results required); then
train LeNet-5 on scikit-learn's digits with tilepy.models (every op a tile kernel) to at
least 97% test accuracy, with a progress bar.

The error bound of each check is derived from the kernel's numerics (tilepy/kernels/
checks.py); `ratio` is the worst error over that bound (<= 1 passes).
"""

import logging
import sys
import time

import numpy as np

import tilepy
from tilepy.kernels import gemm
from tilepy.kernels.checks import demo_cases


def main() -> int:
    kernel = gemm(64, 64, 32, "float16", "float32")
    print(repr(kernel))
    print(kernel.ir)
    cases = demo_cases()
    header = f"{'kernel':24} {'dtype':24} {'shape':24} {'max error':>10} {'ratio':>7} " \
             f"{'time (ms)':>10}  ok"
    print(header)
    print("-" * len(header))
    failed = 0
    with tilepy.backend("interp"):
        for case in cases:
            t0 = time.perf_counter()
            out = case.kernel(*case.inputs)
            ms = (time.perf_counter() - t0) * 1e3
            err, ratio = case.error(out)
            ok = case.passes(out)
            failed += not ok
            print(f"{case.name:24} {case.dtype:24} {case.shape:24} {err:10.3g} {ratio:7.3f} "
                  f"{ms:10.1f}  {'yes' if ok else 'NO'}")
    print(f"\n{len(cases) - failed} of {len(cases)} kernels within their derived bounds "
          "(interpreter, the reference backend)\n")
    failed += jit_side_by_side(cases)
    failed += train_lenet()
    return 1 if failed else 0


JIT_CASES = ("gemm NN", "softmax (online)", "layernorm", "vector add")


def jit_side_by_side(cases) -> int:
    """A few kernels through the Numba JIT: same bits as the interpreter, and the times."""
    logging.getLogger("tilepy").setLevel(logging.WARNING)  # the table shows first calls
    print(f"{'kernel (JIT vs interpreter)':30} {'same bits':>9} {'interp ms':>10} "
          f"{'jit ms':>8} {'first call s':>13}")
    bad = 0
    for case in [c for c in cases if c.name in JIT_CASES]:
        with tilepy.backend("interp"):
            t0 = time.perf_counter()
            ref = case.kernel(*case.inputs)
            t_interp = time.perf_counter() - t0
        with tilepy.backend("jit"):
            t0 = time.perf_counter()
            case.kernel(*case.inputs)  # compiles, or loads from the disk cache
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = case.kernel(*case.inputs)
            t_jit = time.perf_counter() - t0
        same = np.array_equal(out.view(np.uint8), ref.view(np.uint8))
        bad += not same
        print(f"{case.name + ' ' + case.dtype:30} {'yes' if same else 'NO':>9} "
              f"{t_interp * 1e3:10.1f} {t_jit * 1e3:8.2f} {first:13.2f}")
    return bad


def train_lenet(goal: float = 0.97) -> int:
    """LeNet-5 (8x8 variant) on digits: compile its kernels in two processes, train, test."""
    from tilepy.models.kernels.precompile import LENET5, precompile
    from tilepy.models.zoo import digits

    print("\nTraining LeNet-5 on scikit-learn's digits (1437 train / 360 test images, every "
          "op a tile kernel on the JIT)")
    t0 = time.perf_counter()
    done = precompile(LENET5, workers=2)
    print(f"kernels compiled or loaded from the disk cache in {time.perf_counter() - t0:.1f} s "
          f"({len(done)} kernels, two processes; slowest {max(s for _, s in done):.1f} s)")
    model, acc, steps, spent = digits.train("lenet5", **digits.DEMO)
    ok = acc >= goal
    print(f"LeNet-5: test accuracy {acc:.2%} after {steps} steps ({steps / spent:.1f} steps/s); "
          f"goal {goal:.0%}: {'met' if ok else 'MISSED'}; {time.perf_counter() - t0:.1f} s in "
          "all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
