"""Where attention's rows live, for the forward and backward kernels: both layouts are
viewed as 2-d arrays of rows of length dim, and a host-side table lists the query tiles.

- fixed length, (batch, heads, seq, dim) as torch SDPA: row(b, h, s) = (b*H + h)*S + s,
  S the query or the key length (they may differ);
- variable length, packed (total, heads, dim) with cu_seqlens (flash-attn's varlen form,
  cu_seqlens_k for keys of other lengths): row(b, h, s) = (cu[b] + s)*H + h;
- a packed qkv projection (tokens, H + 2 Hkv, dim), as a (N, L, 3E) linear layer gives
  it: q, k and v are views (packed_views) whose rows are H + 2 Hkv apart (the kernels'
  `pitch`); the outputs keep the variable-length layout.
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


def packed_views(rows: np.ndarray, heads: int, kv_heads: int) -> tuple:
    """(Q, K, V): row views of a packed projection's rows (tokens, heads + 2 kv_heads,
    dim) as (rows, dim), q, k and v of a token side by side; each view starts at its
    first row (K and V of one length). The inputs (and, on the gradient's rows, the
    outputs) of the flash kernels built with pitch = heads + 2 kv_heads."""
    end = rows.shape[0] - kv_heads
    return rows, rows[heads:end], rows[heads + kv_heads:]


def tile_table(lengths: np.ndarray, block: int) -> np.ndarray:
    """int32 (tiles, 2): (sequence, first row) for every `block`-row tile of every sequence."""
    rows = [(b, s) for b, n in enumerate(lengths.tolist()) for s in range(0, n, block)]
    return np.asarray(rows, dtype=np.int32).reshape(-1, 2)


DTYPES = ("float32", "bfloat16", "float16")
CAUSAL = {False: 0, None: 0, True: 1, "top_left": 1, "bottom_right": 2}


def causal_mode(causal) -> int:
    """0 (no mask), 1 (top-left aligned: True or 'top_left') or 2 ('bottom_right')."""
    if isinstance(causal, np.bool_):
        causal = bool(causal)
    mode = CAUSAL.get(causal, -1) if isinstance(causal, (bool, str, type(None))) else -1
    if mode < 0:
        raise input_error(f"attention: causal must be False, True, 'top_left' or "
                          f"'bottom_right'; got {causal!r}",
                          hint="True is 'top_left' (torch SDPA's is_causal); 'bottom_right' "
                          "is flash-attn's (query i sees keys j <= i + Lk - Lq)")
    return mode


def describe(q, k, v, cu_seqlens, cu_seqlens_k=None):
    """(heads, kv_heads, dim, cu of q, cu of k (int32), varlen) after checking the inputs.
    Queries and keys may differ in length (cross-attention); cu_seqlens_k defaults to
    cu_seqlens."""
    varlen = cu_seqlens is not None
    _check_arrays(q, k, v, varlen)
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[-1]  # axis 1 in both layouts
    if varlen:
        cu_q = _cu(cu_seqlens, q.shape[0], "cu_seqlens")
        cu_k = cu_q if cu_seqlens_k is None else _cu(cu_seqlens_k, k.shape[0], "cu_seqlens_k")
        if cu_k.size != cu_q.size:
            raise input_error(f"attention: cu_seqlens_k has {cu_k.size} entries, cu_seqlens "
                              f"{cu_q.size}", hint="give both one entry per sequence, + 1")
    else:
        if k.shape[0] != q.shape[0]:
            raise input_error(f"attention: q {q.shape} and k {k.shape} differ in batch",
                              hint="use cu_seqlens for packed sequences")
        cu_q = (np.arange(q.shape[0] + 1) * q.shape[2]).astype(np.int32)
        cu_k = (np.arange(q.shape[0] + 1) * k.shape[2]).astype(np.int32)
    if np.any((np.diff(cu_k) == 0) & (np.diff(cu_q) > 0)):
        raise input_error("attention: a sequence has queries but no keys (its softmax would "
                          "be over nothing)", hint="give every sequence with queries a key")
    return heads, kv_heads, dim, cu_q, cu_k, varlen


def _check_arrays(q, k, v, varlen):
    rank = 3 if varlen else 4
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != rank:
            form = "(total, heads, dim)" if varlen else "(batch, heads, seq, dim)"
            raise input_error(f"attention: expected {name} of shape {form}, got "
                              f"{x.shape}", hint="pass cu_seqlens only with packed "
                              "(total, heads, dim) inputs")
    if k.shape != v.shape or q.dtype != k.dtype or k.dtype != v.dtype \
            or str(q.dtype) not in DTYPES:
        raise input_error(f"attention: k and v must match and share q's dtype, one of "
                          f"{', '.join(DTYPES)}; got q {q.dtype}{q.shape}, k {k.dtype}"
                          f"{k.shape}, v {v.dtype}{v.shape}", hint="cast and reshape before")
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[-1]
    if heads % kv_heads or k.shape[-1] != dim:
        raise input_error(f"attention: q has {heads} heads of dim {dim}, k has "
                          f"{kv_heads} of dim {k.shape[-1]}",
                          hint="heads must be a multiple of kv_heads (GQA)")


def _cu(cu_seqlens, total: int, name: str) -> np.ndarray:
    cu = np.ascontiguousarray(cu_seqlens, dtype=np.int32)
    if cu.ndim != 1 or cu.size < 1 or cu[0] != 0 or np.any(np.diff(cu) < 0) \
            or cu[-1] != total:
        raise input_error(f"attention: {name} must rise from 0 to total={total}; got "
                          f"{cu.tolist()[:8]}", hint=f"{name} = [0, len0, len0+len1, ...]")
    return cu


def flat(x: np.ndarray) -> np.ndarray:
    """The rows view (rows, dim), C-contiguous."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])
