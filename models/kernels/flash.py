"""The library's flash attention (tilepy/kernels/flash_attn.py) for autograd: the kernels
of `attention` and `attention_backward` launched through the models' direct launch
(launch.py), with the tile tables and flags built once per shape instead of per call.
The same kernels on the same arrays as the library's entry points, so the same bits.
"""

from __future__ import annotations

import numpy as np

from tilepy.kernels.attention_api import DQ_PARTS_BYTES, attention_backward
from tilepy.kernels.attn_layout import causal_mode, describe, tile_table
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
    """What one (q, k shapes, dtype, causal, tile) needs: kernels, cu tables, tile tables."""

    def __init__(self, q4: np.ndarray, k4: np.ndarray, causal, block: int):
        heads, kv_heads, dim, self.cu_q, self.cu_k, varlen = describe(q4, k4, k4, None)
        dt = str(q4.dtype)
        self.flags = np.array([causal_mode(causal), int(varlen)], np.int32)
        self.tiles_q = tile_table(np.diff(self.cu_q), block)
        self.tiles_k = tile_table(np.diff(self.cu_k), block)
        nkt = int(-(-np.diff(self.cu_k).max(initial=0) // block))
        rows = q4.size // dim
        self.parts = (max(nkt, 1), rows, dim) if nkt * q4.size * 4 <= DQ_PARTS_BYTES else None
        self.fwd = attention_fwd(heads, kv_heads, dim, block, block, dt)
        self.delta = attention_delta(64, dim, dt)
        self.dkdv = attention_dkdv(heads, kv_heads, dim, block, dt, True)
        self.dq_sum = attention_dq_sum(heads, dim, block, dt)
        for kern in (self.fwd, self.dkdv, self.dq_sum):
            set_grain(kern, GRAIN)


def _plan(q4: np.ndarray, k4: np.ndarray, causal, block: int) -> _Plan:
    key = (q4.shape, k4.shape, q4.dtype, causal, block)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(q4, k4, causal, block)
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
