"""Library bench, sparse rows (issue #18): SpMM and SDDMM on CSR power-law matrices against
scipy.sparse, every output first checked against its derived bound (tilepy.kernels.checks).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/lib_sparse.py [--quick]

scipy's CSR x dense product runs on one thread whatever the machine has, so each tilepy
row is timed at one thread (the same count) and at NUMBA_NUM_THREADS (noted). scipy is a
bench-only comparator (it is installed with scikit-learn), never a dependency of the kernels.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilepy  # noqa: E402
from tilepy.kernels import checks_lib  # noqa: E402
from tilepy.kernels.sparse_api import sddmm, spmm  # noqa: E402


def best_of(fns: dict, rounds: int) -> dict:
    """Minimum seconds per competitor over rounds of alternating calls, after a warm-up."""
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def _threads(n: int) -> None:
    import numba

    numba.set_num_threads(n)


def _check(case, out) -> str:
    err, ratio = case.error(out)
    if not case.passes(out):
        raise AssertionError(f"{case.name}: max error {err:.3g} is {ratio:.3g}x its bound")
    return f"ok, max err {err:.2g} <= bound (ratio {ratio:.2g})"


def _pair(kind, case, M):
    """(tilepy call, peer call, the scipy matrix) for one case."""
    import scipy.sparse as sp

    indptr, indices, data = case.inputs[:3]
    a = sp.csr_matrix((data, indices, indptr), shape=(M, M))
    if kind == "spmm":
        b = case.inputs[3]
        return (lambda: spmm(a, b)), (lambda: a @ b), a
    x, y = case.inputs[3:]
    rows_ = np.repeat(np.arange(M), np.diff(indptr))
    # scipy has no SDDMM: the same values from a gather and a row dot
    return (lambda: sddmm(a, x, y)), \
        (lambda: data * np.einsum("kd,kd->k", x[rows_], y[indices])), a


def _sparse_rows(kind, rng, M, N, quick, full):
    make = checks_lib.spmm_case if kind == "spmm" else checks_lib.sddmm_case
    case = make(rng, M, M, N, alpha=1.1)
    mine, peer, a = _pair(kind, case, M)
    out = []
    with tilepy.backend("jit", fast=True):
        check = _check(case, mine())
        for n in (1, full):
            _threads(n)
            t = best_of({"mine": mine, "peer": peer}, 3 if quick else 7)
            out.append({"kernel": f"{kind} CSR power-law {M}x{M} nnz {a.nnz} (max row "
                        f"{np.diff(a.indptr).max()}) x {N}", "check": check,
                        "fast": t["mine"], "exact": None, "peer": t["peer"],
                        "peer_name": "scipy.sparse (1 thread)" if kind == "spmm" else
                        "numpy gather + einsum (1 thread)",
                        "goal": ">= 1x peer" if kind == "spmm" else "-",
                        "note": f"tilepy on {n} thread(s)"})
        _threads(full)
    return out


def rows(quick: bool = False) -> list[dict]:
    import numba

    full = numba.config.NUMBA_NUM_THREADS
    M = 20_000 if quick else 100_000
    rng = np.random.default_rng(0)
    out = []
    for kind, N in (("spmm", 64), ("sddmm", 64)):
        out += _sparse_rows(kind, rng, M, N, quick, full)
    return out


def _table(rs: list[dict]) -> str:
    """Markdown: times, and peer / tilepy (> 1: tilepy is faster)."""
    lines = ["| kernel | check | fast s | exact s | peer s | peer | peer/fast | peer/exact "
             "| goal | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        ex, peer = r["exact"], r["peer"]
        exact_s, exact_x = ("-", "-") if ex is None else (f"{ex:.4g}", f"{peer / ex:.2f}x")
        lines.append(f"| {r['kernel']} | {r['check']} | {r['fast']:.4g} | {exact_s} | "
                     f"{peer:.4g} | {r['peer_name']} | {peer / r['fast']:.2f}x | {exact_x} | "
                     f"{r['goal']} | {r.get('note', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table(rows("--quick" in sys.argv)))
