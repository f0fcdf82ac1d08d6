"""`make demo`: print a gemm kernel's IR, run every reference kernel in the interpreter,
check each against an independent numpy formulation, and print a table.

The error bound of each check is derived from the kernel's numerics (tilepy/kernels/
checks.py); `ratio` is the worst error over that bound (<= 1 passes).
"""

import sys
import time

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
          "(interpreter, the reference backend)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
