"""Winograd convolution F(m x m, 3 x 3), m = 2 or 4, NHWC, stride 1: three tile kernels and
a batched gemm. The filter transform U = G g G^T, the input transform V = B^T d B of each
(m+2) x (m+2) input tile d (zero outside the image), alpha^2 = (m+2)^2 independent gemms
M[k] = V[k] @ U[k] over (tiles x channels) x (channels x filters), and the output transform
Y = A^T M A. Exact in exact arithmetic; the rounding error grows with the transforms'
constants (checks.winograd_case derives the bound, docs/conv.md shows the measurements).
"""

from fractions import Fraction as Fr

import numpy as np

import tilepy
import tilepy.language as T
from tilepy.backend import run
from tilepy.kernels.conv_direct import pad_nhwc

# Lavin and Gray's matrices (points 0, 1, -1 for m = 2; 0, +-1, +-2, +-1/2 for m = 4), as
# exact fractions: checks.py builds the error bound from the same tables.
MATRICES = {
    2: dict(
        BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        G=[[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)],
           [0, 0, 1]],
        AT=[[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: dict(
        BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        G=[[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
           [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
        AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
            [0, 1, -1, 8, -8, 1]]),
}


def _terms(matrix) -> tuple[list, list]:
    """Per row, its first nonzero (column, coefficient as a float) and the list of the
    others: the kernels unroll these at build time, so a zero coefficient costs nothing."""
    nz = [[(j, float(c)) for j, c in enumerate(row) if c != 0] for row in matrix]
    return [r[0] for r in nz], [r[1:] for r in nz]


def tiles(OH: int, OW: int, m: int) -> tuple[int, int]:
    """Output tiles along height and width."""
    return -(-OH // m), -(-OW // m)


@tilepy.jit(out_idx=[-1])
def winograd_filter(C, F, m=2, block=256, dtype="float32"):
    """U[xi, nu, c, f] = (G g G^T)[xi, nu] for each filter g = Wt[:, :, c, f]."""
    a, (G0, G) = m + 2, _terms(MATRICES[m]["G"])
    rows = list(range(a))  # a Python list: loops over it unroll at build time
    cf = C * F

    @T.prim_func
    def winograd_filter(Wt: T.Tensor((3, 3, C, F), dtype), U: T.Tensor((a, a, C, F), dtype)):
        with T.Kernel(T.ceildiv(cf, block), threads=128) as bx:
            Wf = T.Tensor((3, 3, cf), dtype, Wt.data)
            Uf = T.Tensor((a, a, cf), dtype, U.data)
            g_s = T.alloc_shared((3, 3, block), dtype)
            t_s = T.alloc_shared((a, 3, block), dtype)
            T.copy(Wf[0, 0, bx * block], g_s)
            for xi in rows:  # t = G g: combine rows
                for j, e in T.Parallel(3, block):
                    s = G0[xi][1] * g_s[G0[xi][0], j, e]
                    for i, c in G[xi]:
                        s = s + c * g_s[i, j, e]
                    t_s[xi, j, e] = s
            for nu in rows:  # U = t G^T: combine columns
                for xi, e in T.Parallel(a, block):
                    s = G0[nu][1] * t_s[xi, G0[nu][0], e]
                    for j, c in G[nu]:
                        s = s + c * t_s[xi, j, e]
                    Uf[xi, nu, bx * block + e] = s

    return winograd_filter


BLOCK_P = 16  # tiles per block of the transforms; V and M hold whole blocks of tiles


def geometry(N, H, W, m, pad) -> tuple:
    """(OH, OW, TH, TW, P, Pp, Hp, Wp): output size, tiles along each axis and in all, P
    rounded up to whole blocks, the padded input's size (pad on top and left; bottom and
    right up to whole tiles)."""
    OH, OW = H + 2 * pad - 2, W + 2 * pad - 2
    TH, TW = tiles(OH, OW, m)
    P = N * TH * TW
    return OH, OW, TH, TW, P, -(-P // BLOCK_P) * BLOCK_P, TH * m + 2, TW * m + 2


def _divisor(n: int, most: int) -> int:
    """The largest divisor of n that is at most `most` (a block that tiles n exactly)."""
    return max(d for d in range(1, min(n, most) + 1) if n % d == 0)


@tilepy.jit(out_idx=[-1])
def winograd_input(N, H, W, C, m=2, pad=1, dtype="float32"):
    """V[xi, nu, p, c] = (B^T d B)[xi, nu], d the (m+2)^2 input tile of output tile p
    (tiles numbered n, then tile row, then tile column), channel c, read from Xp (the input
    padded by pad_nhwc to `geometry`'s Hp x Wp). Tiles past the last read tile 0."""
    a, (B0, B) = m + 2, _terms(MATRICES[m]["BT"])
    rows, block_C, block_P = list(range(a)), _divisor(C, 64), BLOCK_P
    _, _, TH, TW, P, Pp, Hp, Wp = geometry(N, H, W, m, pad)

    @T.prim_func
    def winograd_input(Xp: T.Tensor((N, Hp, Wp, C), dtype), V: T.Tensor((a, a, Pp, C), dtype)):
        with T.Kernel(C // block_C, Pp // block_P, threads=128) as (bx, by):
            Xf = T.Tensor((N * Hp * Wp, C), dtype, Xp.data)
            d_s = T.alloc_shared((a, block_P, a, block_C), dtype)  # [i, p, j, c]
            t_s = T.alloc_shared((a, block_P, a, block_C), dtype)  # [xi, p, j, c]
            for p in T.serial(block_P):
                q = T.min(by * block_P + p, P - 1)
                at = (q // (TH * TW) * Hp + q % (TH * TW) // TW * m) * Wp + q % TW * m
                for i in T.serial(a):
                    T.copy(Xf[at + i * Wp, bx * block_C], d_s[i, p, 0:a, 0:block_C])
            for xi in rows:  # t = B^T d: combine rows
                for p, j, c in T.Parallel(block_P, a, block_C):
                    s = B0[xi][1] * d_s[B0[xi][0], p, j, c]
                    for i, k in B[xi]:
                        s = s + k * d_s[i, p, j, c]
                    t_s[xi, p, j, c] = s
            for nu in rows:  # V = t B: combine columns
                for xi, p, c in T.Parallel(a, block_P, block_C):
                    s = B0[nu][1] * t_s[xi, p, B0[nu][0], c]
                    for j, k in B[nu]:
                        s = s + k * t_s[xi, p, j, c]
                    V[xi, nu, by * block_P + p, bx * block_C + c] = s

    return winograd_input


@tilepy.jit(out_idx=[-1])
def winograd_gemm(batch, P, C, F, block_M=256, block_N=64, block_K=64, dtype="float32"):
    """M[z] = V[z] @ U[z] for each of the `batch` transformed points z."""

    @T.prim_func
    def winograd_gemm(V: T.Tensor((batch, P, C), dtype), U: T.Tensor((batch, C, F), dtype),
                      M: T.Tensor((batch, P, F), dtype)):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(P, block_M), batch,
                      threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(acc)
            for k in T.serial(T.ceildiv(C, block_K)):
                T.copy(V[bz, by * block_M, k * block_K], A_s)
                T.copy(U[bz, k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, M[bz, by * block_M, bx * block_N])

    return winograd_gemm


@T.macro
def _store_tiles(o_s, Yf, q0, f0, geo):
    """Copy the output tiles o_s[p, r, c, f] of tiles q0 + p, filters f0 + f, into Y (as
    Yf: pixels x filters): the rows and columns of each tile that lie inside Y."""
    m, TH, TW, OH, OW, P = geo
    bp, bf = o_s.shape[0], o_s.shape[3]
    r_h = T.alloc_fragment((bp,), "int32")  # the tile's top row (or past OH)
    r_w = T.alloc_fragment((bp,), "int32")
    r_at = T.alloc_fragment((bp,), "int32")  # pixel index of (n, r_h, r_w)
    for p in T.Parallel(bp):
        q = q0 + p
        n, th, tw = q // (TH * TW), q % (TH * TW) // TW, q % TW
        r_h[p] = T.if_then_else(q < P, th * m, OH)
        r_w[p] = tw * m
        r_at[p] = (n * OH + r_h[p]) * OW + r_w[p]
    for p in T.serial(bp):
        for r in T.serial(T.min(m, OH - r_h[p])):
            if r_w[p] + m <= OW:
                T.copy(o_s[p, r, 0:m, 0:bf], Yf[r_at[p] + r * OW, f0])
            else:
                for c in T.serial(OW - r_w[p]):
                    T.copy(o_s[p, r, c, 0:bf], Yf[r_at[p] + r * OW + c, f0])


@T.macro
def _combine_columns(t, o_s, A0, A, block_P, block_F):
    """Y = t A, the output transform's column combine: o_s[p, r, c, f] = sum over nu of
    t[r, nu, p, f] A[nu, c], column c's first nonzero term first (`_terms`' order)."""
    m = len(A0)
    cols = list(range(m))  # unrolled when the kernel is built
    for c in cols:
        for p, r, f in T.Parallel(block_P, m, block_F):
            s = A0[c][1] * t[r, A0[c][0], p, f]
            for nu, k in A[c]:
                s = s + k * t[r, nu, p, f]
            o_s[p, r, c, f] = s


@tilepy.jit(out_idx=[-1])
def winograd_output(N, OH, OW, F, m=2, dtype="float32"):
    """Y[n, th*m + r, tw*m + s, f] = (A^T M A)[r, s] of tile p = (n, th, tw), filter f."""
    a, (A0, A) = m + 2, _terms(MATRICES[m]["AT"])
    outs, block_F, block_P = list(range(m)), _divisor(F, 64), BLOCK_P
    TH, TW = tiles(OH, OW, m)
    P = N * TH * TW
    Pp = -(-P // block_P) * block_P

    @T.prim_func
    def winograd_output(M: T.Tensor((a, a, Pp, F), dtype), Y: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(F // block_F, Pp // block_P, threads=128) as (bx, by):
            Yf = T.Tensor((N * OH * OW, F), dtype, Y.data)
            m_s = T.alloc_shared((a, a, block_P, block_F), dtype)
            t_s = T.alloc_shared((m, a, block_P, block_F), dtype)
            o_s = T.alloc_shared((block_P, m, m, block_F), dtype)
            T.copy(M[0, 0, by * block_P, bx * block_F], m_s)
            for r in outs:  # t = A^T M: combine rows
                for nu, p, f in T.Parallel(a, block_P, block_F):
                    s = A0[r][1] * m_s[A0[r][0], nu, p, f]
                    for xi, k in A[r]:
                        s = s + k * m_s[xi, nu, p, f]
                    t_s[r, nu, p, f] = s
            _combine_columns(t_s, o_s, A0, A, block_P, block_F)  # Y = t A
            _store_tiles(o_s, Yf, by * block_P, bx * block_F, (m, TH, TW, OH, OW, P))

    return winograd_output


def fused_block(C: int, block_F: int, m: int, l2: int | None = None) -> int:
    """Tiles per block of `winograd_fused`: the largest power of two up to 64 whose block
    arrays (input tiles, one row of B^T d, one V tile, the accumulator, A^T M and the
    output tiles: floats per tile below) fit half of this machine's L2, so that each of
    the (m+2)^2 small gemms and both transforms work on cache-resident data."""
    from tilepy.tileop.schedule import caches

    a = m + 2
    per_tile = 4 * (a * a * C + a * C + C + block_F + m * a * block_F + m * m * block_F)
    budget = (caches().l2 if l2 is None else l2) // 2 - 4 * C * block_F  # minus U's tile
    bp = 64
    while bp > 4 and bp * per_tile > budget:
        bp //= 2
    return bp


def _groups(patterns: list) -> list[list[int]]:
    """Runs of consecutive indices with equal patterns (e.g. rows of B^T with the same
    nonzero columns): the fused kernel writes one loop per run, not one per index."""
    runs: list = []
    for i, pat in enumerate(patterns):
        if runs and runs[-1][1] == pat:
            runs[-1][0].append(i)
        else:
            runs.append(([i], pat))
    return [r for r, _ in runs]


def _coef(idx, first: int, values: list, dtype: str):
    """values[idx - first] for a runtime idx (a chain of selects, cast to dtype; traced
    at build time), or the one value of a run of one row as a build-time float."""
    k = float(values[-1])
    if len(values) == 1:
        return k
    for n in range(len(values) - 2, -1, -1):
        k = T.if_then_else(idx == first + n, float(values[n]), k)
    return T.cast(k, dtype)


def _nonzero(row) -> list[int]:
    return [j for j, c in enumerate(row) if c != 0]


def _row_terms(idx, matrix, run: list[int], dtype: str) -> tuple:
    """Row idx (run-time, within `run`, rows of one nonzero pattern) of `matrix` as its
    first (column, coefficient) and a tuple of the others, as _terms gives a fixed row."""
    terms = tuple((j, _coef(idx, run[0], [matrix[x][j] for x in run], dtype))
                  for j in _nonzero(matrix[run[0]]))
    return terms[0], terms[1:]


@tilepy.jit(out_idx=[-1])
def winograd_fused(N, H, W, C, F, m=2, pad=1, block_P=0, dtype="float32"):
    """Y from the padded input Xp and the transformed filters U in one kernel: per block
    of block_P output tiles (0: `fused_block`'s choice) and block_F filters, the input
    tiles are read once, then for each point (xi, nu) the V tile (B^T d B)[xi, nu] of all
    the block's tiles, one (block_P x C) @ (C x block_F) gemm with U[xi, nu], and that
    product's share of A^T M added into the block's row sums; last Y = (A^T M) A. No
    intermediate leaves the block. Points whose rows of B^T and columns of A^T have the
    same nonzeros share one loop (`_groups`; coefficients then are run-time values), so
    the code holds 9 point bodies, not (m+2)^2. Every value is computed by the same
    expressions in the same order as the staged kernels: exact mode gives their bits."""
    a, BT, AT = m + 2, MATRICES[m]["BT"], MATRICES[m]["AT"]
    (A0, A) = _terms(AT)
    outs = list(range(m))
    xis = _groups([(tuple(_nonzero(BT[x])), tuple(r for r in outs if AT[r][x] != 0))
                   for x in range(a)])
    nus = _groups([tuple(_nonzero(BT[x])) for x in range(a)])
    OH, OW, TH, TW, P, _, Hp, Wp = geometry(N, H, W, m, pad)
    block_F = F if F <= 128 else _divisor(F, 64)
    bp = block_P or fused_block(C, block_F, m)

    @T.prim_func
    def winograd_fused(Xp: T.Tensor((N, Hp, Wp, C), dtype), U: T.Tensor((a, a, C, F), dtype),
                       Y: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(F // block_F, T.ceildiv(P, bp), threads=128) as (bx, by):
            Xf = T.Tensor((N * Hp * Wp, C), dtype, Xp.data)
            Uf = T.Tensor((a * a, C, F), dtype, U.data)
            Yf = T.Tensor((N * OH * OW, F), dtype, Y.data)
            d_s = T.alloc_shared((a, bp, a, C), dtype)  # input tiles [i, p, j, c]
            t_s = T.alloc_shared((bp, a, C), dtype)  # row xi of B^T d
            v_s = T.alloc_shared((bp, C), dtype)  # V at point (xi, nu)
            u_s = T.alloc_shared((C, block_F), dtype)
            acc = T.alloc_fragment((bp, block_F), dtype)  # M at point (xi, nu)
            o_t = T.alloc_shared((m, a, bp, block_F), dtype)  # A^T M
            o_s = T.alloc_shared((bp, m, m, block_F), dtype)
            for p in T.serial(bp):
                q = T.min(by * bp + p, P - 1)
                at = (q // (TH * TW) * Hp + q % (TH * TW) // TW * m) * Wp + q % TW * m
                for i in T.serial(a):
                    T.copy(Xf[at + i * Wp, 0], d_s[i, p, 0:a, 0:C])
            for xr in xis:
                for xo in T.serial(len(xr)):
                    xi = xr[0] + xo
                    kb0, kbs = _row_terms(xi, BT, xr, dtype)
                    for p, j, c in T.Parallel(bp, a, C):  # row xi of B^T d
                        s = kb0[1] * d_s[kb0[0], p, j, c]
                        for i, k in kbs:
                            s = s + k * d_s[i, p, j, c]
                        t_s[p, j, c] = s
                    for nr in nus:
                        for no in T.serial(len(nr)):
                            nu = nr[0] + no
                            kv0, kvs = _row_terms(nu, BT, nr, dtype)
                            for p, c in T.Parallel(bp, C):  # V = (B^T d) B at (xi, nu)
                                s = kv0[1] * t_s[p, kv0[0], c]
                                for j, k in kvs:
                                    s = s + k * t_s[p, j, c]
                                v_s[p, c] = s
                            T.copy(Uf[xi * a + nu, 0, bx * block_F], u_s)
                            T.gemm(v_s, u_s, acc, clear_accum=True)
                            for r in outs:  # add M's share of A^T M, in xi's order
                                if AT[r][xr[0]] != 0:
                                    ka = _coef(xi, xr[0], [AT[r][x] for x in xr], dtype)
                                    if A0[r][0] < xr[0]:
                                        for p, f in T.Parallel(bp, block_F):
                                            o_t[r, nu, p, f] = o_t[r, nu, p, f] + ka * acc[p, f]
                                    elif len(xr) == 1:
                                        for p, f in T.Parallel(bp, block_F):
                                            o_t[r, nu, p, f] = ka * acc[p, f]
                                    else:  # the run holds row r's first term
                                        for p, f in T.Parallel(bp, block_F):
                                            o_t[r, nu, p, f] = T.if_then_else(
                                                xi == A0[r][0], ka * acc[p, f],
                                                o_t[r, nu, p, f] + ka * acc[p, f])
            _combine_columns(o_t, o_s, A0, A, bp, block_F)  # Y = (A^T M) A
            _store_tiles(o_s, Yf, by * bp, bx * block_F, (m, TH, TW, OH, OW, P))

    return winograd_fused


def launch(kernel, *arrays) -> None:
    """Run a kernel of this module on the active backend with every array given (outputs
    preallocated by the caller, written in place); all sizes are build-time here."""
    run(kernel.func, {p.name: a for p, a in zip(kernel.func.params, arrays)}, {})


class Winograd:
    """conv2d by Winograd F(m x m, 3 x 3) for one shape: Y = W(X, Wt), NHWC, stride 1,
    padding `pad`; its kernels and intermediate arrays are built once. `fused` (the
    default) runs `winograd_fused` (no full-size intermediates); otherwise the staged
    kernels (input transform, batched gemm, output transform) through V and M."""

    def __init__(self, N, H, W, C, F, m=2, pad=1, fused=True, block_P=0, dtype="float32"):
        OH, OW, _, _, _, P, Hp, Wp = geometry(N, H, W, m, pad)
        a = m + 2
        self.pad = pad_nhwc(N, H, W, C, pad, pad, Hp, Wp, dtype=dtype)
        self.k_filter = winograd_filter(C, F, m, dtype=dtype)
        dt = np.dtype(dtype)
        self.xp = np.empty((N, Hp, Wp, C), dt)
        self.u = np.empty((a, a, C, F), dt)
        self.y = np.empty((N, OH, OW, F), dt)
        if fused:
            self.stages = (winograd_fused(N, H, W, C, F, m, pad, block_P, dtype=dtype),)
        else:
            self.stages = (winograd_input(N, H, W, C, m, pad, dtype=dtype),
                           winograd_gemm(a * a, P, C, F, dtype=dtype),
                           winograd_output(N, OH, OW, F, m, dtype=dtype))
            self.v = np.empty((a, a, P, C), dt)
            self.mm = np.empty((a, a, P, F), dt)

    def filters(self, wt: np.ndarray) -> np.ndarray:
        """U, the transformed filters (computed once per set of weights)."""
        launch(self.k_filter, wt, self.u)
        return self.u

    def __call__(self, x: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        """Y (this object's output array, overwritten by the next call) from the input
        and the transformed filters (default: the last `filters` result)."""
        u = self.u if u is None else u
        launch(self.pad, x, self.xp)
        if len(self.stages) == 1:
            launch(self.stages[0], self.xp, u, self.y)
            return self.y
        k_in, k_gemm, k_out = self.stages
        launch(k_in, self.xp, self.v)
        a2 = u.shape[0] * u.shape[1]
        launch(k_gemm, self.v.reshape(a2, *self.v.shape[2:]), u.reshape(a2, *u.shape[2:]),
               self.mm.reshape(a2, *self.mm.shape[2:]))
        launch(k_out, self.mm, self.y)
        return self.y
