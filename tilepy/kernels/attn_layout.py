"""Where attention's rows live, for the forward and backward kernels: both layouts are
viewed as 2-d arrays of rows of length dim, and a host-side table lists the query tiles.

- fixed length, (batch, heads, seq, dim) as torch SDPA: row(b, h, s) = (b*H + h)*S + s;
- variable length, packed (total, heads, dim) with cu_seqlens (flash-attn's varlen form):
  row(b, h, s) = (cu[b] + s)*H + h.
A tile table row (b, s0) is one tile of `block` rows of sequence b starting at s0, so the
grid covers only real rows however unequal the lengths are.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.inputs import input_error


def row_offset(varlen, b, h, heads: int, start, n):
    """(offset, stride): row(b, h, s) = offset + s * stride; varlen (0 or 1), b, h,
    start = cu[b] and n = cu[b + 1] - cu[b] are values traced into the kernel."""
    import tilepy.language as T

    return (T.if_then_else(varlen != 0, start * heads + h, (b * heads + h) * n),
            T.if_then_else(varlen != 0, heads, 1))


def tile_table(lengths: np.ndarray, block: int) -> np.ndarray:
    """int32 (tiles, 2): (sequence, first row) for every `block`-row tile of every sequence."""
    rows = [(b, s) for b, n in enumerate(lengths.tolist()) for s in range(0, n, block)]
    return np.asarray(rows, dtype=np.int32).reshape(-1, 2)


def describe(q, k, v, cu_seqlens):
    """(heads, kv_heads, dim, cu_seqlens as int32, varlen) after checking the inputs."""
    varlen = cu_seqlens is not None
    rank = 3 if varlen else 4
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != rank:
            form = "(total, heads, dim)" if varlen else "(batch, heads, seq, dim)"
            raise input_error(f"attention: expected {name} of shape {form}, got "
                                      f"{x.shape}", hint="pass cu_seqlens only with packed "
                                      "(total, heads, dim) inputs")
    if k.shape != v.shape or q.dtype != k.dtype or k.dtype != v.dtype:
        raise input_error(f"attention: k and v must match and share q's dtype; got "
                                  f"q {q.dtype}{q.shape}, k {k.dtype}{k.shape}, v "
                                  f"{v.dtype}{v.shape}", hint="cast and reshape before")
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[-1]  # axis 1 in both layouts
    if heads % kv_heads or k.shape[-1] != dim:
        raise input_error(f"attention: q has {heads} heads of dim {dim}, k has "
                                  f"{kv_heads} of dim {k.shape[-1]}",
                                  hint="heads must be a multiple of kv_heads (GQA)")
    if varlen:
        cu = np.ascontiguousarray(cu_seqlens, dtype=np.int32)
        if cu.ndim != 1 or cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] != q.shape[0] \
                or k.shape[0] != q.shape[0]:
            raise input_error(
                f"attention: cu_seqlens must rise from 0 to total={q.shape[0]}; got "
                f"{cu.tolist()[:8]}", hint="cu_seqlens = [0, len0, len0+len1, ...]")
    else:
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
            raise input_error(f"attention: q {q.shape} and k {k.shape} differ in "
                                      "batch or sequence length",
                                      hint="use cu_seqlens for unequal lengths")
        cu = (np.arange(q.shape[0] + 1) * q.shape[2]).astype(np.int32)
    return heads, kv_heads, dim, cu, varlen


def flat(x: np.ndarray) -> np.ndarray:
    """The rows view (rows, dim), C-contiguous."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])
