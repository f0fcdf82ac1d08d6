"""`spmm(a, b)` and `sddmm(a, x, y)` on CSR matrices: check the arrays, pick the merge-path
partition and launch the kernels of sparse.py on the current backend. A CSR matrix is any
object with indptr, indices, data and shape (scipy.sparse.csr_matrix works; scipy is not
needed) or a tuple (indptr, indices, data, shape).
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.inputs import input_error
from tilepy.kernels.sparse import sddmm_csr, spmm_csr, spmm_fixup

ITEMS_PER_BLOCK = 2048  # merge-path items (rows + nonzeros) per block


def csr_arrays(a, dtype):
    """(indptr int32, indices int32, data of `dtype`, (M, K)) after checking them."""
    if isinstance(a, tuple):
        indptr, indices, data, shape = a
    else:
        indptr, indices, data, shape = a.indptr, a.indices, a.data, a.shape
    indptr = np.ascontiguousarray(indptr, dtype=np.int32)
    indices = np.ascontiguousarray(indices, dtype=np.int32)
    data = np.ascontiguousarray(data, dtype=dtype)
    M, K = shape
    if indptr.shape != (M + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or \
            indices.shape != data.shape or indices.shape != (int(indptr[-1]),):
        raise input_error(f"CSR arrays do not fit: shape {shape}, indptr {indptr.shape} "
                          f"ending at {indptr[-1]}, indices {indices.shape}, data "
                          f"{data.shape}", hint="indptr has M + 1 rising entries from 0 "
                          "to nnz; indices and data have nnz entries")
    if indices.size and (indices.min() < 0 or indices.max() >= K):
        raise input_error(f"CSR column indices must lie in [0, {K}); got "
                          f"[{indices.min()}, {indices.max()}]", hint="check the shape")
    return indptr, indices, data, (M, K)


def spmm(a, b, items_per_block=ITEMS_PER_BLOCK, block_N=64):
    """C = A @ B for a CSR A (M, K) and a dense B (K, N), both of B's dtype."""
    b = np.ascontiguousarray(b)
    indptr, indices, data, (M, K) = csr_arrays(a, b.dtype)
    if b.ndim != 2 or b.shape[0] != K:
        raise input_error(f"spmm: A is {M}x{K}, so B must have {K} rows; got {b.shape}",
                          hint="B is dense (K, N)")
    N, nnz = b.shape[1], indices.size
    nb = max(1, -(-(M + nnz) // items_per_block))
    c = np.empty((M, N), b.dtype)
    carry = np.empty((nb, N), np.float32)
    carry_row = np.empty(nb, np.int32)
    spmm_csr(block_N, str(b.dtype))(indptr, indices, data, b, c, carry, carry_row)
    spmm_fixup(block_N, str(b.dtype))(carry, carry_row, c)
    return c


def sddmm(a, x, y, block_K=256):
    """out[k] = data[k] * (x[row k] . y[col k]) for each nonzero k of the CSR A (M, N),
    x (M, D), y (N, D): A's pattern sampling x @ y.T, values in A's nonzero order."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    indptr, indices, data, (M, N) = csr_arrays(a, x.dtype)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != M or y.shape[0] != N or \
            x.shape[1] != y.shape[1] or x.dtype != y.dtype:
        raise input_error(f"sddmm: A is {M}x{N}, so x must be ({M}, D) and y ({N}, D) of "
                          f"one dtype; got x {x.dtype}{x.shape}, y {y.dtype}{y.shape}",
                          hint="y holds the columns' vectors as rows (pass B.T)")
    out = np.empty(indices.size, x.dtype)
    sddmm_csr(x.shape[1], block_K, str(x.dtype))(indptr, indices, data, x, y, out)
    return out
