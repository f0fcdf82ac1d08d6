"""Strassen-Winograd matrix product over the library gemm (float32): each level splits
A (M x K) and B (K x N) into quadrants (odd sizes padded with zeros), forms the seven left
and seven right operands with two tile kernels (`strassen_split`, 8 additions in all), runs
the seven half-size products (recursively, or with the library gemm at the last level) and
combines them with a third (`strassen_merge`, 7 additions). Levels are chosen by size
(`levels`); checks.strassen_case derives the error bound, docs/conv.md the measurements.
"""

from __future__ import annotations

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.backend import run
from tilepy.kernels.gemm import gemm

# The smallest dimension from which levels() adds a level. On this machine one level
# with reused work arrays (Strassen) beat numpy's BLAS only at 4096, in loaded runs, and
# lost at 2048; allocating them per call (strassen()) lost at 4096 too (docs/conv.md's
# crossover table), so the default stays above the sizes measured.
CROSSOVER = 8192


@tilepy.jit
def strassen_split(side="A", block=64):
    """From X (R x S) the seven operands O (7, ceil(R/2), ceil(S/2)) of one level: for A,
    [A11, A12, S4, A22, S1, S2, S3] with S1 = A21 + A22, S2 = S1 - A11, S3 = A11 - A21,
    S4 = A12 - S2; for B, [B11, B21, B22, T4, T1, T2, T3] with T1 = B12 - B11,
    T2 = B22 - T1, T3 = B22 - B12, T4 = T2 - B21. Quadrant entries past X's end are 0."""
    R, S, hr, hs = T.symbolic("R"), T.symbolic("S"), T.symbolic("hr"), T.symbolic("hs")

    @T.prim_func
    def strassen_split(X: T.Tensor((R, S), "float32"), O: T.Tensor((7, hr, hs), "float32")):
        with T.Kernel(T.ceildiv(hs, block), T.ceildiv(hr, block), threads=128) as (bx, by):
            for i, j in T.Parallel(block, block):
                r, c = by * block + i, bx * block + j
                if r < hr and c < hs:
                    x11 = X[r, c]
                    x12 = T.if_then_else(hs + c < S, X[r, hs + c], 0.0)
                    x21 = T.if_then_else(hr + r < R, X[hr + r, c], 0.0)
                    x22 = T.if_then_else(hr + r < R and hs + c < S, X[hr + r, hs + c], 0.0)
                    if side == "A":
                        s1 = x21 + x22
                        s2 = s1 - x11
                        O[0, r, c] = x11
                        O[1, r, c] = x12
                        O[2, r, c] = x12 - s2
                        O[3, r, c] = x22
                        O[4, r, c] = s1
                        O[5, r, c] = s2
                        O[6, r, c] = x11 - x21
                    else:
                        t1 = x12 - x11
                        t2 = x22 - t1
                        O[0, r, c] = x11
                        O[1, r, c] = x21
                        O[2, r, c] = x22
                        O[3, r, c] = t2 - x21
                        O[4, r, c] = t1
                        O[5, r, c] = t2
                        O[6, r, c] = x22 - x12

    return strassen_split


@tilepy.jit
def strassen_merge(block=64):
    """C (M x N) from the seven products P (7, ceil(M/2), ceil(N/2)): U2 = P1 + P6,
    U3 = U2 + P7, U4 = U2 + P5; C11 = P1 + P2, C12 = U4 + P3, C21 = U3 - P4,
    C22 = U3 + P5 (entries past C's end are dropped)."""
    M, N, hm, hn = T.symbolic("M"), T.symbolic("N"), T.symbolic("hm"), T.symbolic("hn")

    @T.prim_func
    def strassen_merge(P: T.Tensor((7, hm, hn), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(hn, block), T.ceildiv(hm, block), threads=128) as (bx, by):
            for i, j in T.Parallel(block, block):
                r, c = by * block + i, bx * block + j
                if r < hm and c < hn:
                    u2 = P[0, r, c] + P[5, r, c]
                    u3 = u2 + P[6, r, c]
                    C[r, c] = P[0, r, c] + P[1, r, c]
                    if hn + c < N:
                        C[r, hn + c] = u2 + P[4, r, c] + P[2, r, c]
                    if hm + r < M:
                        C[hm + r, c] = u3 - P[3, r, c]
                        if hn + c < N:
                            C[hm + r, hn + c] = u3 + P[4, r, c]

    return strassen_merge


def levels(M: int, K: int, N: int, crossover: int = CROSSOVER) -> int:
    """Levels of recursion for an M x K by K x N product: one more while the smallest
    dimension is at least `crossover`."""
    n = 0
    while min(M, K, N) >= crossover:
        M, K, N, n = -(-M // 2), -(-K // 2), -(-N // 2), n + 1
    return n


def _launch(kernel, *arrays) -> None:
    func = kernel.func
    sizes = {}
    for p, a in zip(func.params, arrays):
        for s, d in zip(p.shape, a.shape):
            if hasattr(s, "name"):
                sizes[s.name] = d
    run(func, {p.name: a for p, a in zip(func.params, arrays)}, sizes)


class Strassen:
    """a @ b for float32 matrices of one shape, (M, K) @ (K, N), with `n_levels` levels
    (default: `levels(M, K, N)`): each level's seven operands of each side and its seven
    products are allocated once, here, and reused by every call and by the seven
    sub-products in turn (fresh arrays cost a page fault per page on every call)."""

    def __init__(self, M: int, K: int, N: int, n_levels: int | None = None):
        self.levels = levels(M, K, N) if n_levels is None else n_levels
        self.shape, self.work = (M, K, N), []
        for _ in range(self.levels):
            M, K, N = -(-M // 2), -(-K // 2), -(-N // 2)
            self.work.append(tuple(np.empty((7, r, c), np.float32)
                                   for r, c in ((M, K), (K, N), (M, N))))

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None):
        """a @ b into `out` (allocated when None), on the active backend."""
        M, _, N = self.shape
        out = np.empty((M, N), np.float32) if out is None else out
        _product(a, b, self.work, out)
        return out


def _product(a, b, work: list, out) -> None:
    """out = a @ b with one level per entry of `work` (lhs, rhs, products)."""
    if not work:
        _launch(gemm(in_dtype="float32", out_dtype="float32"), a, b, out)
        return
    lhs, rhs, prods = work[0]
    _launch(strassen_split("A"), a, lhs)
    _launch(strassen_split("B"), b, rhs)
    for z in range(7):
        _product(lhs[z], rhs[z], work[1:], prods[z])
    _launch(strassen_merge(), prods, out)


def strassen(a: np.ndarray, b: np.ndarray, n_levels: int | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
    """a @ b for float32 matrices with `n_levels` Strassen-Winograd levels (default:
    `levels(M, K, N)`), each leaf product the library gemm, on the active backend.
    Allocates its work arrays per call; `Strassen` keeps them for repeated calls."""
    (M, K), N = a.shape, b.shape[1]
    return Strassen(M, K, N, n_levels)(a, b, out)
