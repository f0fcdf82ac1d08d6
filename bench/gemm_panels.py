"""Fast mode's whole-product gemm on panels over Numba's threads (jit/blas.py gemm_par)
against one BLAS call on OpenBLAS's own two threads and on one, on the transformer row's
shapes and two square ones; min wall time of alternating calls, GFLOP/s:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE [OMP_WAIT_POLICY=PASSIVE] \\
        .venv/bin/python bench/gemm_panels.py

Uses scipy's OpenBLAS (what the JIT's `_gemm_acc` calls). Not a test.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # before numpy or scipy load

import numba  # noqa: E402
import numpy as np  # noqa: E402

from tilepy.jit import blas  # noqa: E402

SHAPES = [(1024, 1024, 1024), (512, 512, 512), (1024, 64, 192), (1024, 256, 64),
          (64, 1024, 256)]


def main() -> int:
    acc, par = blas.numba_gemm_acc(), blas.numba_gemm_par()
    found = blas._openblas()
    if found is None:
        print("scipy's OpenBLAS was not found: nothing to compare")
        return 1
    put = found[1]
    rng = np.random.default_rng(0)
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (default)')}, load "
          f"{os.getloadavg()[0]:.2f}; GFLOP/s, best of alternating calls")
    print(f"{'M, K, N':>18} {'BLAS 2 threads':>15} {'panels':>8} {'BLAS 1 thread':>14}")
    for m, k, n in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        runs = {"blas2": (2, acc), "panels": (1, par), "blas1": (1, acc)}
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(20 if m * n * k > 1e8 else 200):
            for name, (threads, fn) in runs.items():
                put(threads)
                t0 = time.perf_counter()
                fn(a, b, c, False, False, 0.0)
                best[name] = min(best[name], time.perf_counter() - t0)
        gf = {name: 2 * m * n * k / t / 1e9 for name, t in best.items()}
        print(f"{f'{m}, {k}, {n}':>18} {gf['blas2']:15.0f} {gf['panels']:8.0f} "
              f"{gf['blas1']:14.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
