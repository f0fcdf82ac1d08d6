"""The training attention's entry points: `attention` (forward, returning the output and
the logsumexp) and `attention_backward` (dq, dk, dv), for (batch, heads, seq, dim) inputs or
packed (total, heads, dim) ones with cu_seqlens (and cu_seqlens_k when the keys' lengths
differ). They check the inputs, build the tile tables and launch the kernels of flash_attn
on the current backend.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.attn_layout import causal_mode, describe, flat, tile_table
from tilepy.kernels.flash_attn import (
    attention_delta,
    attention_dkdv,
    attention_dq,
    attention_dq_sum,
    attention_fwd,
)

DQ_PARTS_BYTES = 256 << 20  # largest buffer of dQ partials (KV tiles x rows x dim)


def _flags(causal, varlen: bool) -> np.ndarray:
    """The kernels' run-time options (one compile serves every combination): causal 0
    none, 1 top-left aligned, 2 bottom-right aligned; varlen 0 or 1."""
    mode = causal_mode(causal)
    return np.array([mode, int(varlen)], np.int32)


def attention(q, k, v, causal=False, cu_seqlens=None, block_M=64, block_N=64,
              cu_seqlens_k=None):
    """(o, lse): o = softmax(q k^T / sqrt(d) [+ causal mask]) v per head, lse the natural
    logsumexp of each query row's scaled scores (float32), shaped like q without its last
    axis. Keys may be fewer or more than queries. causal: False; True or 'top_left' (torch
    SDPA's is_causal: query i sees keys j <= i); 'bottom_right' (flash-attn >= 2.1, torch's
    causal_lower_right: keys j <= i + Lk - Lq, per sequence), where a query that sees no
    key (Lq > Lk) gives o = 0 and lse = -inf (and zero gradients). float32, bfloat16 or
    float16 inputs, float32 accumulation; o has the inputs' dtype."""
    heads, kv_heads, dim, cu_q, cu_k, varlen = describe(q, k, v, cu_seqlens, cu_seqlens_k)
    kern = attention_fwd(heads, kv_heads, dim, block_M, block_N, str(q.dtype))
    Q, K, V = flat(q), flat(k), flat(v)
    o = np.empty_like(Q)
    lse = np.empty(Q.shape[0], np.float32)
    kern(Q, K, V, cu_q, cu_k, tile_table(np.diff(cu_q), block_M), _flags(causal, varlen), o,
         lse)
    return o.reshape(q.shape), lse.reshape(q.shape[:-1])


def attention_backward(q, k, v, o, lse, do, causal=False, cu_seqlens=None, block=64,
                       cu_seqlens_k=None):
    """(dq, dk, dv) of sum(do * o) for o = attention(q, k, v, ...); lse from `attention`."""
    heads, kv_heads, dim, cu_q, cu_k, varlen = describe(q, k, v, cu_seqlens, cu_seqlens_k)
    dt = str(q.dtype)
    Q, K, V, O, dO = flat(q), flat(k), flat(v), flat(o), flat(do)
    L = np.ascontiguousarray(lse, dtype=np.float32).reshape(-1)
    delta = np.empty(Q.shape[0], np.float32)
    attention_delta(64, dim, dt)(dO, O, delta)
    tiles_q, tiles_k = tile_table(np.diff(cu_q), block), tile_table(np.diff(cu_k), block)
    dq, dk, dv = np.empty_like(Q), np.empty_like(K), np.empty_like(V)
    common, flags = (cu_q, cu_k), _flags(causal, varlen)
    nkt = int(-(-np.diff(cu_k).max(initial=0) // block))
    if nkt * Q.size * 4 <= DQ_PARTS_BYTES:  # dS K per KV tile, summed after: 5 gemms a pair
        parts = np.empty((max(nkt, 1), Q.shape[0], dim), np.float32)
        attention_dkdv(heads, kv_heads, dim, block, dt, True)(
            Q, K, V, dO, L, delta, *common, tiles_k, flags, parts, dk, dv)
        attention_dq_sum(heads, dim, block, dt)(parts, *common, tiles_q, flags, dq)
    else:  # attention_dq recomputes P and dS: 7 gemms a pair, no extra memory
        attention_dkdv(heads, kv_heads, dim, block, dt)(
            Q, K, V, dO, L, delta, *common, tiles_k, flags, _NO_PARTS[dim], dk, dv)
        attention_dq(heads, kv_heads, dim, block, dt)(Q, K, V, dO, L, delta, *common,
                                                      tiles_q, flags, dq)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


class _NoParts(dict):
    """An unused (1, 1, dim) DQP argument per dim."""

    def __missing__(self, dim):
        self[dim] = np.zeros((1, 1, dim), np.float32)
        return self[dim]


_NO_PARTS = _NoParts()
