"""Sparse x dense kernels on CSR (indptr, indices, data), balanced for power-law matrices.

SpMM, C = A @ B, splits the merge path (rows' ends and nonzeros, M + nnz items: CUB's and
Merrill-Garland's merge-based SpMV) into equal pieces, one block each: a row with a million
nonzeros is shared by many blocks and a run of empty rows costs one item each, so every
block does the same work whatever the row lengths. Row binning (buckets by length) was not
chosen: it still leaves one block per very long row, the case power-law matrices have.
A block finds its first row by a binary search on the path; rows that end inside it are
written to C, the row it stops in leaves its partial sum in Carry, and `spmm_fixup` adds
the carries to their rows in block order. The partition depends on the matrix and
`items_per_block` only, so the sums (nonzeros ascending within a piece, pieces ascending)
do not depend on the thread count.

SDDMM, out[k] = data[k] * (A[row k] . B[col k]), costs the same for every nonzero: blocks
take equal runs of nonzeros (the row of the first found by a binary search on indptr).
"""

import tilepy
import tilepy.language as T

ACC = "float32"


@T.macro
def _path_row(Indptr, d, M, st):
    """st[0] = the first row whose end item (Indptr[r + 1] + r) is >= d, or M."""
    st[0] = 0
    st[1] = M
    while st[0] < st[1]:
        mid = (st[0] + st[1]) // 2
        if Indptr[mid + 1] + mid >= d:
            st[1] = mid
        else:
            st[0] = mid + 1


@tilepy.jit
def spmm_csr(block_N=64, dtype="float32"):
    M, N, KB, NNZ, NB = (T.symbolic(s) for s in ("M", "N", "KB", "NNZ", "NB"))

    @T.prim_func
    def spmm_csr(Indptr: T.Tensor((M + 1,), "int32"), Indices: T.Tensor((NNZ,), "int32"),
                 Data: T.Tensor((NNZ,), dtype), Bd: T.Tensor((KB, N), dtype),
                 C: T.Tensor((M, N), dtype), Carry: T.Tensor((NB, N), ACC),
                 CarryRow: T.Tensor((NB,), "int32")):
        with T.Kernel(T.ceildiv(N, block_N), NB, threads=128) as (bx, b):
            acc = T.alloc_fragment((block_N,), ACC)
            st = T.alloc_local((2,), "int32")
            items = T.ceildiv(M + NNZ, NB)
            d0 = T.min(b * items, M + NNZ)
            d1 = T.min(d0 + items, M + NNZ)
            _path_row(Indptr, d0, M, st)
            i0 = st[0]
            _path_row(Indptr, d1, M, st)
            i1 = st[0]
            k0, k1 = d0 - i0, d1 - i1
            for r in T.serial(i0, T.min(i1 + 1, M)):
                T.clear(acc)
                for kk in T.serial(T.max(Indptr[r], k0), T.min(Indptr[r + 1], k1)):
                    for j in T.Parallel(block_N):
                        acc[j] = acc[j] + Data[kk] * Bd[Indices[kk], bx * block_N + j]
                if r < i1:
                    for j in T.Parallel(block_N):
                        C[r, bx * block_N + j] = acc[j]
                else:
                    for j in T.Parallel(block_N):
                        Carry[b, bx * block_N + j] = acc[j]
            if bx == 0:
                CarryRow[b] = T.if_then_else(i1 < M, i1, -1)

    return spmm_csr


@tilepy.jit
def spmm_fixup(block_N=64, dtype="float32"):
    """C[CarryRow[b]] += Carry[b] for b ascending (rows a piece stopped in)."""
    M, N, NB = T.symbolic("M"), T.symbolic("N"), T.symbolic("NB")

    @T.prim_func
    def spmm_fixup(Carry: T.Tensor((NB, N), ACC), CarryRow: T.Tensor((NB,), "int32"),
                   C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            for b in T.serial(NB):
                r = CarryRow[b]
                if r >= 0:
                    for j in T.Parallel(block_N):
                        c = bx * block_N + j
                        C[r, c] = C[r, c] + Carry[b, c]

    return spmm_fixup


@tilepy.jit
def sddmm_csr(dim, block_K=256, dtype="float32"):
    M, NNZ, MA, NB_ = T.symbolic("M"), T.symbolic("NNZ"), T.symbolic("MA"), T.symbolic("NB_")

    @T.prim_func
    def sddmm_csr(Indptr: T.Tensor((M + 1,), "int32"), Indices: T.Tensor((NNZ,), "int32"),
                  Data: T.Tensor((NNZ,), dtype), A: T.Tensor((MA, dim), dtype),
                  Bt: T.Tensor((NB_, dim), dtype), Out: T.Tensor((NNZ,), dtype)):
        with T.Kernel(T.ceildiv(NNZ, block_K), threads=128) as bx:
            st = T.alloc_local((2,), "int32")
            row = T.alloc_var("int32", init=0)
            prod = T.alloc_fragment((1, dim), ACC)
            dot = T.alloc_fragment((1,), ACC)
            # the row of nonzero k0: the first r with Indptr[r + 1] > k0
            st[0] = 0
            st[1] = M
            while st[0] < st[1]:
                mid = (st[0] + st[1]) // 2
                if Indptr[mid + 1] > bx * block_K:
                    st[1] = mid
                else:
                    st[0] = mid + 1
            row = st[0]
            for kk in T.serial(bx * block_K, T.min(bx * block_K + block_K, NNZ)):
                while Indptr[row + 1] <= kk:
                    row = row + 1
                for d in T.Parallel(dim):
                    prod[0, d] = A[row, d] * Bt[Indices[kk], d]
                T.reduce_sum(prod, dot, dim=1)  # d ascending
                Out[kk] = Data[kk] * dot[0]

    return sddmm_csr
