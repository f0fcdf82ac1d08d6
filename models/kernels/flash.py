"""The library's flash attention (tilepy/kernels/flash_attn.py) for autograd: the kernels
of `attention` and `attention_backward` launched through the models' direct launch
(launch.py), with the tile tables and flags built once per shape instead of per call.
The same kernels on the same arrays as the library's entry points, so the same bits.
A packed qkv projection (N, L, 3E) is read in place (packed_forward/_backward): the
kernels built with a row pitch address each head's rows, so the head split and merge are
not copied, and the per-head arithmetic (so the bits) is unchanged.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.attention_api import DQ_PARTS_BYTES, attention_backward
from tilepy.kernels.attn_layout import causal_mode, describe, packed_views, tile_table
from tilepy.kernels.flash_attn import (
    attention_delta,
    attention_dkdv,
    attention_dq_sum,
    attention_fwd,
)
from tilepy.models.kernels.launch import launch, set_grain
from tilepy.models.kernels.record import contiguous, copy_into, replayed_call

_PLANS: dict = {}
# Attention does O(keys) work per element: its launches use every thread from this many
# elements in their largest array on (launch.GRAIN is for one pass over the data)
GRAIN = 1 << 13


class _Plan:
    """What one (q, k shapes, dtype, causal, tile) needs: kernels, cu tables, tile tables.
    `layout` is attn_layout.describe's (heads, kv_heads, dim, cu_q, cu_k, varlen); pitch
    (packed qkv rows) builds the kernels that read q, k, v views of one projection."""

    def __init__(self, layout: tuple, dt: str, causal, block: int, pitch: int = 0):
        heads, kv_heads, dim, self.cu_q, self.cu_k, varlen = layout
        self.flags = np.array([causal_mode(causal), int(varlen)], np.int32)
        self.tiles_q = tile_table(np.diff(self.cu_q), block)
        self.tiles_k = tile_table(np.diff(self.cu_k), block)
        nkt = int(-(-np.diff(self.cu_k).max(initial=0) // block))
        rows = int(self.cu_q[-1]) * heads  # query rows in either layout
        self.parts = (max(nkt, 1), rows, dim) if nkt * rows * dim * 4 <= DQ_PARTS_BYTES \
            else None
        extra = {"pitch": pitch} if pitch else {}
        self.fwd = attention_fwd(heads, kv_heads, dim, block, block, dt, **extra)
        self.delta = attention_delta(64, dim, dt)
        self.dkdv = attention_dkdv(heads, kv_heads, dim, block, dt, True, **extra)
        self.dq_sum = attention_dq_sum(heads, dim, block, dt, **extra)
        for kern in (self.fwd, self.dkdv, self.dq_sum):
            set_grain(kern, GRAIN)


def _plan(q4: np.ndarray, k4: np.ndarray, causal, block: int) -> _Plan:
    key = (q4.shape, k4.shape, q4.dtype, causal, block)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(describe(q4, k4, k4, None), str(q4.dtype), causal, block)
    return plan


def packed_plan(qkv: np.ndarray, heads: int, causal, block: int) -> _Plan:
    """The plan of a packed (N, L, 3E) qkv projection's self-attention (N sequences of
    L tokens as the variable-length layout); its `parts` is None when the dQ partials
    would be too large (then packed_backward cannot run: split the heads instead)."""
    key = ("packed", qkv.shape, qkv.dtype, heads, causal, block)
    plan = _PLANS.get(key)
    if plan is None:
        n, length, e3 = qkv.shape
        cu = (np.arange(n + 1) * length).astype(np.int32)
        layout = (heads, heads, e3 // (3 * heads), cu, cu, True)
        plan = _PLANS[key] = _Plan(layout, str(qkv.dtype), causal, block, 3 * heads)
    return plan


def flash_forward(q4, k4, v4, causal: bool, block: int):
    """(o, lse) of tilepy.kernels.attention(q4, k4, v4, causal, block_M=block,
    block_N=block) for (batch, heads, seq, dim) arrays."""
    p = _plan(q4, k4, causal, block)
    d = q4.shape[-1]
    Q, K, V = (contiguous(x).reshape(-1, d) for x in (q4, k4, v4))
    o = np.empty_like(Q)
    lse = np.empty(Q.shape[0], np.float32)
    launch(p.fwd, Q, K, V, p.cu_q, p.cu_k, p.tiles_q, p.flags, o, lse)
    return o.reshape(q4.shape), lse.reshape(q4.shape[:-1])


def flash_backward(q4, k4, v4, o, lse, do, causal: bool, block: int, packed: bool = False):
    """(dq, dk, dv) of tilepy.kernels.attention_backward(..., block=block); with `packed`
    (q, k and v of one shape) one (3, *q4.shape) array holding the three side by side."""
    p = _plan(q4, k4, causal, block)
    if p.parts is None:  # dQ partials too large: the library's recomputing path
        grads = replayed_call(attention_backward, q4, k4, v4, o, lse, do, causal,
                              block=block)
        if not packed:
            return grads
        out = np.empty((3, *q4.shape), q4.dtype)
        for dst, src in zip(out, grads):
            copy_into(dst, src)
        return out
    d = q4.shape[-1]
    Q, K, V, O, dO = (contiguous(x).reshape(-1, d) for x in (q4, k4, v4, o, do))
    L = lse.reshape(-1)
    delta = np.empty(Q.shape[0], np.float32)
    launch(p.delta, dO, O, delta)
    parts = np.empty(p.parts, np.float32)
    if packed:
        out = np.empty((3, *Q.shape), Q.dtype)
        dq, dk, dv = out
    else:
        dq, dk, dv = np.empty_like(Q), np.empty_like(K), np.empty_like(V)
    launch(p.dkdv, Q, K, V, dO, L, delta, p.cu_q, p.cu_k, p.tiles_k, p.flags, parts, dk, dv)
    launch(p.dq_sum, parts, p.cu_q, p.cu_k, p.tiles_q, p.flags, dq)
    if packed:
        return out.reshape(3, *q4.shape)
    return dq.reshape(q4.shape), dk.reshape(k4.shape), dv.reshape(v4.shape)


def packed_forward(qkv: np.ndarray, heads: int, causal: bool, block: int):
    """(o, lse) of self-attention on a C-contiguous (N, L, 3E) qkv projection (q, k, v of
    each token side by side, heads of E / heads features each): o (N, L, E) with the
    heads merged, lse (N * L * heads,) in the same (token, head) order."""
    p = packed_plan(qkv, heads, causal, block)
    n, length, e3 = qkv.shape
    d = e3 // (3 * heads)
    o = np.empty((n, length, e3 // 3), qkv.dtype)
    lse = np.empty(n * length * heads, np.float32)
    launch(p.fwd, *packed_views(qkv.reshape(-1, d), heads, heads), p.cu_q, p.cu_k,
           p.tiles_q, p.flags, o.reshape(-1, d), lse)
    return o, lse


def packed_backward(qkv: np.ndarray, o, lse, do, heads: int, causal: bool, block: int):
    """The (N, L, 3E) gradient of qkv for packed_forward's (o, lse) and do (N, L, E)."""
    p = packed_plan(qkv, heads, causal, block)
    d = qkv.shape[2] // (3 * heads)
    O, dO = o.reshape(-1, d), contiguous(do).reshape(-1, d)
    delta = np.empty(O.shape[0], np.float32)
    launch(p.delta, dO, O, delta)
    parts = np.empty(p.parts, np.float32)
    dqkv = np.empty(qkv.shape, qkv.dtype)
    Q, K, V = packed_views(qkv.reshape(-1, d), heads, heads)
    dq, dk, dv = packed_views(dqkv.reshape(-1, d), heads, heads)
    launch(p.dkdv, Q, K, V, dO, lse, delta, p.cu_q, p.cu_k, p.tiles_k, p.flags, parts, dk, dv)
    launch(p.dq_sum, parts, p.cu_q, p.cu_k, p.tiles_q, p.flags, dq)
    return dqkv
