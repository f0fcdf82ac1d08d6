"""Time of tilepy.validate on a 4096x4096x4096 float32 gemm output against numpy's matmul of
the same operands, in one process, interleaved rounds; prints the median ratio (goal <= 3).
Run with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset for this command only."""

import statistics
import sys
import time

import numpy as np

import tilepy


def main(n: int = 4096, rounds: int = 3) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = a @ b
    ratios = []
    for _ in range(rounds):
        t = time.perf_counter()
        np.matmul(a, b)
        t_mm = time.perf_counter() - t
        t = time.perf_counter()
        report = tilepy.validate(out, "gemm", {"a": a, "b": b})
        t_val = time.perf_counter() - t
        ratios.append(t_val / t_mm)
        print(f"numpy matmul {t_mm:.2f} s, validate {t_val:.2f} s, ratio {t_val / t_mm:.2f}, "
              f"passed {report.passed}", flush=True)
    print(f"| {n}^3 fp32 gemm | median validate / matmul = {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:]))
