"""JIT benchmark of issue #3's atomics and local bounds checks, each against its own
"before" built in the same process: one table, medians of interleaved rounds.

- atomics: the launch as it ships (blocks in prange, per-block logs replayed in block
  order) vs the previous serial launch (`range`, adds in place), for a histogram (many
  blocks adding into a few bins) and a split-K gemm. Both outputs are checked bit for bit
  against each other (the interpreter equals the serial form: tests/jit/test_atomics.py).
- bounds checks: gemm 1024 and softmax 4096x1024 (every local access proven in range, so
  no check is emitted) and a row gather through a local index array (one data-dependent
  index checked per element) with the checks as they ship vs with them removed.
- global element checks: a bias add written with element loads and stores of global
  arrays (`Z[r, c] = X[r, c] + B[c]`), as shipped (jit/versioning.py: the nest runs
  unchecked once its index ranges are known to lie inside the arrays) vs every access
  checked (no versioning) vs the guards of before (loads outside gave 0, no error).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/jit_checks_bench.py \
        [--rounds 7]

The OpenBLAS overrides are unset for this command only (nothing here calls BLAS; the
command matches bench/jit_bench.py's). Not a test.
"""


import argparse
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilepy.language as T  # noqa: E402
from tilepy.jit import atomics, bounds, compiler  # noqa: E402
from tilepy.kernels import gemm, gemm_split_k, softmax  # noqa: E402


@contextmanager
def serial_atomics():
    """Lower launches with atomics as before this change: blocks in order, adds in place."""
    saved = atomics.plan
    atomics.plan = lambda s, em: atomics.Plan({}, "benchmark: the previous serial launch")
    try:
        yield
    finally:
        atomics.plan = saved


@contextmanager
def no_checks():
    """Lower without local bounds checks (the code before this change)."""
    saved = bounds.CheckedEmitter._index, bounds.check_region
    bounds.CheckedEmitter._index = lambda self, buf, exprs, idx, what: ", ".join(idx)
    import tilepy.jit.regions as regions

    saved_r = regions.check_region
    regions.check_region = lambda *a, **k: None
    try:
        yield
    finally:
        bounds.CheckedEmitter._index, bounds.check_region = saved
        regions.check_region = saved_r


@contextmanager
def no_versioning():
    """Every global element access checked: no unchecked copy of any nest."""
    from tilepy.jit import versioning

    saved = versioning.plan
    versioning.plan = lambda em, w, loop: None
    try:
        yield
    finally:
        versioning.plan = saved


@contextmanager
def guards_only():
    """Global element accesses as before their checks: a load outside gives 0 and a store
    outside is dropped, silently."""
    from tilepy.jit.scalars import Emitter

    saved = bounds.CheckedEmitter.global_load, bounds.CheckedEmitter.element_store
    bounds.CheckedEmitter.global_load = lambda self, e: Emitter.expr(self, e)
    bounds.CheckedEmitter.element_store = lambda self, buf, idx, v: self.store(buf, idx, v)
    try:
        with no_versioning():
            yield
    finally:
        bounds.CheckedEmitter.global_load, bounds.CheckedEmitter.element_store = saved


def build(func, ctx=None):
    """A compiled kernel, bypassing the memory cache (the variants share the PrimFunc)."""
    if ctx is None:
        return compiler._build(func, False, "numba", True, False)
    with ctx():
        return compiler._build(func, False, "numba", True, False)


def interleave(fns: dict, rounds: int) -> dict:
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def histogram(n: int, block: int, bins: int):
    @T.prim_func
    def hist(Idx: T.Tensor((n,), "int32"), W: T.Tensor((n,), "float32"),
             H: T.Tensor((bins,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                j = bx * block + i
                if j < n:
                    w = W[j]
                    T.atomic_add(H[Idx[j]], T.exp(w) * w)  # some work per element

    return hist


def gather(bm: int, n: int):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def gather_rows(X: T.Tensor((M, N), "float32"), P: T.Tensor((bm,), "int32"),
                    Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            t = T.alloc_fragment((bm, n), "float32")
            perm = T.alloc_fragment((bm,), "int32")
            T.copy(X[bx * bm, 0], t)
            T.copy(P[0], perm)
            for i, j in T.Parallel(bm, n):
                Y[bx * bm + i, j] = t[perm[i], j] * 2.0

    return gather_rows


def bias_add(bm: int, bn: int):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def bias_add(X: T.Tensor((M, N), "float32"), B: T.Tensor((N,), "float32"),
                 Z: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                Z[by * bm + i, bx * bn + j] = X[by * bm + i, bx * bn + j] + B[bx * bn + j]

    return bias_add


def compare(what: str, new, old, arrays: dict, sizes: dict, out: str, rounds: int,
            labels=("now", "before")) -> None:
    a = {k: v.copy() for k, v in arrays.items()}
    b = {k: v.copy() for k, v in arrays.items()}
    new(a, sizes)
    old(b, sizes)
    if not np.array_equal(a[out].view(np.uint32), b[out].view(np.uint32)):
        raise AssertionError(f"{what}: the two forms differ")
    t = interleave({labels[0]: lambda: new(a, sizes), labels[1]: lambda: old(b, sizes)},
                   rounds)
    print(f"{what:<46} {labels[0]} {t[labels[0]] * 1e3:8.2f} ms   {labels[1]} "
          f"{t[labels[1]] * 1e3:8.2f} ms   {labels[1]}/{labels[0]} "
          f"{t[labels[1]] / t[labels[0]]:5.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    r = ap.parse_args().rounds
    rng = np.random.default_rng(0)
    print("atomics: prange + per-block logs (now) vs serial blocks (before)")
    n = 1 << 22
    f = histogram(n, 1024, 16).func
    arrays = dict(Idx=rng.integers(0, 16, n).astype(np.int32),
                  W=rng.standard_normal(n).astype(np.float32), H=np.zeros(16, np.float32))
    compare("histogram 4M -> 16 bins", build(f), build(f, serial_atomics), arrays, {}, "H",
            r)
    f = gemm_split_k(64, 64, 32, 4).func
    M = N = 512
    K = 4096
    arrays = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                  B=rng.standard_normal((K, N)).astype(np.float32),
                  C=np.zeros((M, N), np.float32))
    compare("split-K gemm 512x512x4096, 4 splits", build(f), build(f, serial_atomics),
            arrays, {"M": M, "N": N, "K": K}, "C", r)
    print("local bounds checks: as shipped (now) vs none (before)")
    f = gemm(64, 64, 32, "float32", "float32").func
    M = N = K = 1024
    arrays = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                  B=rng.standard_normal((K, N)).astype(np.float32),
                  C=np.zeros((M, N), np.float32))
    compare("gemm fp32 1024 (no check emitted)", build(f), build(f, no_checks), arrays,
            {"M": M, "N": N, "K": K}, "C", r)
    f = softmax().func
    arrays = dict(X=rng.standard_normal((4096, 1024)).astype(np.float32),
                  Y=np.zeros((4096, 1024), np.float32))
    compare("softmax 4096x1024 (no check emitted)", build(f), build(f, no_checks), arrays,
            {"M": 4096, "N": 1024}, "Y", r)
    f = gather(16, 1024).func
    arrays = dict(X=rng.standard_normal((4096, 1024)).astype(np.float32),
                  P=rng.permutation(16).astype(np.int32),
                  Y=np.zeros((4096, 1024), np.float32))
    compare("row gather 4096x1024 (one checked index)", build(f), build(f, no_checks),
            arrays, {"M": 4096, "N": 1024}, "Y", r)
    print("global element checks: versioned nests (now) vs every access checked / vs the "
          "silent guards of before")
    f = bias_add(32, 256).func
    arrays = dict(X=rng.standard_normal((4096, 4096)).astype(np.float32),
                  B=rng.standard_normal(4096).astype(np.float32),
                  Z=np.zeros((4096, 4096), np.float32))
    now = build(f)
    compare("bias add 4096x4096, element accesses", now, build(f, no_versioning), arrays,
            {"M": 4096, "N": 4096}, "Z", r, labels=("now", "checked"))
    compare("bias add 4096x4096, element accesses", now, build(f, guards_only), arrays,
            {"M": 4096, "N": 4096}, "Z", r, labels=("now", "guards"))


if __name__ == "__main__":
    main()
