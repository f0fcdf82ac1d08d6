"""Flash attention for training: a forward that also writes the logsumexp of each query row,
and a backward that recomputes the probabilities from it (FlashAttention-2's scheme), with
causal masking (top-left aligned as torch SDPA's is_causal, or bottom-right as flash-attn
>= 2.1: query i sees keys j <= i + shift, shift = 0 or Lk - Lq), grouped KV heads (GQA:
query head h reads KV head h // (heads // kv_heads)), queries and keys of different lengths
(cross-attention: CuQ and CuK give each sequence's rows) and variable lengths (packed
sequences). Rows are addressed through attn_layout (both layouts, one kernel); the
wrappers that build tables are in attention_api. The online softmax
(online_softmax_state/_step) also serves the fixed-shape forward of attention.py.

Backward, without atomics: `attention_delta` (Delta = rowsum(dO * O)), `attention_dkdv`
(one block per KV tile and KV head: the group's query heads, then query tiles, ascending,
add into dK and dV) and `attention_dq` (one block per query tile: KV tiles ascending).
Scores are in base 2: P = exp2(s * log2(e)/sqrt(d) - lse * log2(e)). Causal masking and
the layout are run-time flags (Flags = [causal, varlen]; causal 0 none, 1 top-left, 2
bottom-right): one compile per head count, dim, tile and dtype serves them all. A query
row that sees no key (bottom-right with Lq > Lk) gets o = 0 and lse = -inf, and the
backward treats it as a padding row (P = 0: zero gradients). Inputs may be float32,
bfloat16 or float16; every sum is
accumulated in float32 and P, dP, dS stay float32 in the backward's gemms.
`pitch` (build-time, attention_fwd/_dkdv/_dq_sum; the variable-length layout, Flags[1] =
1): Q, K and V (and dQ, dK, dV) are views of one packed qkv projection, tokens `pitch`
rows apart (attn_layout.packed_views), while
O, LSE, dO and Delta keep the variable-length layout (the dQ partials: each head's rows in
a row): no head split or merge is copied.
"""

import math

import tilepy
import tilepy.language as T
from tilepy.kernels.attn_layout import row_offset

LOG2E, LN2 = math.log2(math.e), math.log(2.0)
ACC = "float32"
NEG_INF = -math.inf


def _sizes():
    return T.symbolic("RQ"), T.symbolic("RK"), T.symbolic("B1"), T.symbolic("NT")


def _input_rows(RQ, pitch: int):
    """The query inputs' row count: the outputs' (RQ), or its own for a packed view."""
    return T.symbolic("RI") if pitch else RQ


@T.macro
def _load_rows(dst, src, off, stride, s0, n, rows, dim):
    for i, d in T.Parallel(rows, dim):
        dst[i, d] = T.if_then_else(s0 + i < n, src[off + (s0 + i) * stride, d], 0.0)


@T.macro
def causal_shift(causal, nq, nk):
    """How far right the causal diagonal moves: query i sees keys j <= i + shift (nk - nq
    bottom-right aligned, causal == 2; else 0)."""
    return T.if_then_else(causal == 2, nk - nq, 0)


@T.macro
def _mask(scores, q0, k0, nq, nk, causal, block_M, block_N, shift):
    """Scores start at 0 where the key is visible to the query, else -inf; the gemm adds."""
    for i, j in T.Parallel(block_M, block_N):
        ok = (k0 + j < nk) and (q0 + i < nq) and (causal == 0 or k0 + j <= q0 + i + shift)
        scores[i, j] = T.if_then_else(ok, 0.0, NEG_INF)


@T.macro
def masked_scores(scores, Q_s, K_s, q0, k0, nq, nk, causal, block_M, block_N, may_mask=True,
                  shift=0):
    """scores = Q_s K_s^T, -inf where masked; a tile with every key visible to every query
    skips the mask (a cleared accumulator gives the same sums), and may_mask=False (known
    when the kernel is built) leaves the mask out of the kernel. With causal != 0 query i
    sees the keys j <= i + shift of its sequence (shift 0: top-left, torch SDPA's
    is_causal)."""
    if not may_mask:
        T.gemm(Q_s, K_s, scores, transpose_B=True, clear_accum=True)
    elif k0 + block_N <= nk and q0 + block_M <= nq and (
            causal == 0 or k0 + block_N <= q0 + 1 + shift):
        T.gemm(Q_s, K_s, scores, transpose_B=True, clear_accum=True)
    else:
        _mask(scores, q0, k0, nq, nk, causal, block_M, block_N, shift)
        T.gemm(Q_s, K_s, scores, transpose_B=True)


@T.macro
def online_softmax_state(block_M, block_N, dim, dtype):
    """The online softmax's buffers, cleared (no key seen yet): (scores, probs, acc_o,
    m_new, m_old, rescale, block_sum, denom); probs holds P in the inputs' dtype."""
    scores = T.alloc_fragment((block_M, block_N), ACC)
    probs = T.alloc_fragment((block_M, block_N), dtype)
    acc_o = T.alloc_fragment((block_M, dim), ACC)
    m_new = T.alloc_fragment((block_M,), ACC)
    m_old = T.alloc_fragment((block_M,), ACC)
    rescale = T.alloc_fragment((block_M,), ACC)
    block_sum = T.alloc_fragment((block_M,), ACC)
    denom = T.alloc_fragment((block_M,), ACC)
    T.clear(acc_o)
    T.clear(denom)
    T.fill(m_new, NEG_INF)
    return scores, probs, acc_o, m_new, m_old, rescale, block_sum, denom


@T.macro
def online_softmax_step(state, V_s, scale, dtype, block_M, block_N, dim):
    """Fold one KV tile's scores (state[0], -inf where masked) and values V_s into the
    running max, denominator and output: the flash-attention update in base 2
    (scale = log2(e) / sqrt(d)). Low-precision inputs round P to their dtype before P V,
    as FlashAttention and torch's CPU kernel do."""
    scores, probs, acc_o, m_new, m_old, rescale, block_sum, denom = state
    T.copy(m_new, m_old)
    T.reduce_max(scores, m_new, dim=1, clear=False)
    for i in T.Parallel(block_M):
        rescale[i] = T.exp2(m_old[i] * scale - m_new[i] * scale)
    for i, j in T.Parallel(block_M, block_N):
        scores[i, j] = T.exp2(scores[i, j] * scale - m_new[i] * scale)
    T.reduce_sum(scores, block_sum, dim=1)
    for i in T.Parallel(block_M):
        denom[i] = denom[i] * rescale[i] + block_sum[i]
    for i, j in T.Parallel(block_M, dim):
        acc_o[i, j] *= rescale[i]
    if dtype == ACC:  # probs would be a copy of scores: use them as they are
        T.gemm(scores, V_s, acc_o)
    else:
        T.copy(scores, probs)
        T.gemm(probs, V_s, acc_o)


@T.macro
def _sees_keys(causal, row, shift):
    """Whether query `row` sees any key (every sequence with queries has a key)."""
    return causal == 0 or row + shift >= 0


@T.macro
def _keys_seen(causal, row_end, nk, shift):
    """How many leading keys the queries before `row_end` see together."""
    return T.if_then_else(causal != 0, T.min(T.max(row_end + shift, 0), nk), nk)


@tilepy.jit
def attention_fwd(heads, kv_heads, dim, block_M=64,
                  block_N=64, dtype="float32", pitch=0):
    group, scale = heads // kv_heads, LOG2E / math.sqrt(dim)
    RQ, RK, B1, NT = _sizes()
    RI, kv_pitch = _input_rows(RQ, pitch), pitch or kv_heads

    @T.prim_func
    def attention_fwd(Q: T.Tensor((RI, dim), dtype), K: T.Tensor((RK, dim), dtype),
                      V: T.Tensor((RK, dim), dtype), CuQ: T.Tensor((B1,), "int32"),
                      CuK: T.Tensor((B1,), "int32"), Tiles: T.Tensor((NT, 2), "int32"),
                      Flags: T.Tensor((2,), "int32"), O: T.Tensor((RQ, dim), dtype),
                      LSE: T.Tensor((RQ,), ACC)):
        with T.Kernel(NT, heads, threads=128) as (bx, by):
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            state = online_softmax_state(block_M, block_N, dim, dtype)
            scores, probs, acc_o, m_new, m_old, rescale, block_sum, denom = state
            b, q0 = Tiles[bx, 0], Tiles[bx, 1]
            nq, nk = CuQ[b + 1] - CuQ[b], CuK[b + 1] - CuK[b]
            qoff, qst = row_offset(Flags[1], b, by, heads, CuQ[b], nq)
            koff, kst = row_offset(Flags[1], b, by // group, kv_pitch, CuK[b], nk)
            shift = causal_shift(Flags[0], nq, nk)
            if pitch:  # q's rows in the packed projection
                ioff, ist = row_offset(Flags[1], b, by, pitch, CuQ[b], nq)
                _load_rows(Q_s, Q, ioff, ist, q0, nq, block_M, dim)
            else:
                _load_rows(Q_s, Q, qoff, qst, q0, nq, block_M, dim)
            for kb in T.serial(T.ceildiv(_keys_seen(Flags[0], q0 + block_M, nk, shift),
                                         block_N)):
                _load_rows(K_s, K, koff, kst, kb * block_N, nk, block_N, dim)
                masked_scores(scores, Q_s, K_s, q0, kb * block_N, nq, nk, Flags[0], block_M,
                              block_N, True, shift)
                _load_rows(V_s, V, koff, kst, kb * block_N, nk, block_N, dim)
                online_softmax_step(state, V_s, scale, dtype, block_M, block_N, dim)
            for i, d in T.Parallel(block_M, dim):
                if q0 + i < nq:  # a row that sees no key: 0 (its acc_o / denom is 0 / 0)
                    O[qoff + (q0 + i) * qst, d] = T.if_then_else(
                        _sees_keys(Flags[0], q0 + i, shift), acc_o[i, d] / denom[i], 0.0)
            for i in T.Parallel(block_M):
                if q0 + i < nq:
                    LSE[qoff + (q0 + i) * qst] = T.if_then_else(
                        _sees_keys(Flags[0], q0 + i, shift),
                        (m_new[i] * scale + T.log2(denom[i])) * LN2, NEG_INF)

    return attention_fwd


@tilepy.jit
def attention_delta(block_M=64, dim=64, dtype="float32"):
    """Delta[r] = sum_d dO[r, d] * O[r, d], d ascending in float32."""
    R = T.symbolic("R")

    @T.prim_func
    def attention_delta(dO: T.Tensor((R, dim), dtype), O: T.Tensor((R, dim), dtype),
                        Delta: T.Tensor((R,), ACC)):
        with T.Kernel(T.ceildiv(R, block_M), threads=128) as bx:
            a = T.alloc_fragment((block_M, dim), ACC)
            o = T.alloc_fragment((block_M, dim), ACC)
            s = T.alloc_fragment((block_M,), ACC)
            T.copy(dO[bx * block_M, 0], a)
            T.copy(O[bx * block_M, 0], o)
            for i, d in T.Parallel(block_M, dim):
                a[i, d] = a[i, d] * o[i, d]
            T.reduce_sum(a, s, dim=1)
            T.copy(s, Delta[bx * block_M])

    return attention_delta


@T.macro
def _bwd_tiles(block, dim, dtype):
    """The backward's tiles: (Q_s, dO_s, K_s, V_s, scores, P, dP, lse2, delta)."""
    Q_s = T.alloc_shared((block, dim), dtype)
    dO_s = T.alloc_shared((block, dim), dtype)
    K_s = T.alloc_shared((block, dim), dtype)
    V_s = T.alloc_shared((block, dim), dtype)
    scores = T.alloc_fragment((block, block), ACC)
    P = T.alloc_fragment((block, block), ACC)
    dP = T.alloc_fragment((block, block), ACC)
    lse2 = T.alloc_fragment((block,), ACC)
    delta = T.alloc_fragment((block,), ACC)
    return Q_s, dO_s, K_s, V_s, scores, P, dP, lse2, delta


@T.macro
def _recompute(tiles, q0, k0, nq, nk, causal, scale, block, shift):
    """P and dS of a (query tile, KV tile) pair from the loaded tiles and row stats."""
    Q_s, dO_s, K_s, V_s, scores, P, dP, lse2, delta = tiles
    masked_scores(scores, Q_s, K_s, q0, k0, nq, nk, causal, block, block, True, shift)
    T.gemm(dO_s, V_s, dP, transpose_B=True, clear_accum=True)
    _probs(scores, P, dP, lse2, delta, scale, block, block)


@T.macro
def _probs(scores, P, dP, lse2, delta, scale, block_M, block_N):
    """P = exp2(s * scale - lse2) in `P`; dS = P * (dP - Delta) in `dP`."""
    for i, j in T.Parallel(block_M, block_N):
        P[i, j] = T.exp2(scores[i, j] * scale - lse2[i])
    for i, j in T.Parallel(block_M, block_N):
        dP[i, j] = P[i, j] * (dP[i, j] - delta[i])


@T.macro
def _load_stats(lse2, delta, LSE, Delta, off, stride, s0, n, rows, causal, shift):
    """lse * log2(e) and Delta of the tile's rows; 0 for rows past the end and rows that
    see no key (lse -inf), whose scores are all -inf: P = exp2(-inf) = 0 there."""
    for i in T.Parallel(rows):
        lse2[i] = T.if_then_else(s0 + i < n and _sees_keys(causal, s0 + i, shift),
                                 LSE[off + (s0 + i) * stride] * LOG2E, 0.0)
        delta[i] = T.if_then_else(s0 + i < n, Delta[off + (s0 + i) * stride], 0.0)


@T.macro
def _store_rows(dst, src, off, stride, s0, n, rows, dim, factor):
    for i, d in T.Parallel(rows, dim):
        if s0 + i < n:
            dst[off + (s0 + i) * stride, d] = src[i, d] * factor


@tilepy.jit
def attention_dkdv(heads, kv_heads, dim, block=64, dtype="float32", dq_parts=False,
                   pitch=0):
    """dK, dV of one KV tile: the group's query heads, then the query tiles, ascending.
    dq_parts: also write dS K of each (KV tile kt, query row) to DQP[kt, row] (summed by
    attention_dq_sum), instead of attention_dq recomputing P and dS."""
    group, scale, sm = heads // kv_heads, LOG2E / math.sqrt(dim), 1.0 / math.sqrt(dim)
    RQ, RK, B1, NT = _sizes()
    NKT, RP = T.symbolic("NKT"), T.symbolic("RP")
    RI, kv_pitch = _input_rows(RQ, pitch), pitch or kv_heads

    @T.prim_func
    def attention_dkdv(Q: T.Tensor((RI, dim), dtype), K: T.Tensor((RK, dim), dtype),
                       V: T.Tensor((RK, dim), dtype), dO: T.Tensor((RQ, dim), dtype),
                       LSE: T.Tensor((RQ,), ACC), Delta: T.Tensor((RQ,), ACC),
                       CuQ: T.Tensor((B1,), "int32"), CuK: T.Tensor((B1,), "int32"),
                       Tiles: T.Tensor((NT, 2), "int32"), Flags: T.Tensor((2,), "int32"),
                       DQP: T.Tensor((NKT, RP, dim), ACC),
                       dK: T.Tensor((RK, dim), dtype), dV: T.Tensor((RK, dim), dtype)):
        with T.Kernel(NT, kv_heads, threads=128) as (bx, by):
            tiles = _bwd_tiles(block, dim, dtype)
            Q_s, dO_s, K_s, V_s, scores, P, dP, lse2, delta = tiles
            dK_l = T.alloc_fragment((block, dim), ACC)
            dV_l = T.alloc_fragment((block, dim), ACC)
            if dq_parts:
                dq_l = T.alloc_fragment((block, dim), ACC)
            b, k0 = Tiles[bx, 0], Tiles[bx, 1]
            nq, nk = CuQ[b + 1] - CuQ[b], CuK[b + 1] - CuK[b]
            koff, kst = row_offset(Flags[1], b, by, kv_pitch, CuK[b], nk)
            _load_rows(K_s, K, koff, kst, k0, nk, block, dim)
            _load_rows(V_s, V, koff, kst, k0, nk, block, dim)
            T.clear(dK_l)
            T.clear(dV_l)
            shift = causal_shift(Flags[0], nq, nk)
            # the first query tile that sees key k0: its rows from k0 - shift on
            first = T.if_then_else(Flags[0] != 0, T.max(k0 - shift, 0) // block, 0)
            for g in T.serial(group):
                qoff, qst = row_offset(Flags[1], b, by * group + g, heads, CuQ[b], nq)
                if pitch:  # q's rows in the projection; the head's dQ partials in a row
                    ioff, ist = row_offset(Flags[1], b, by * group + g, pitch, CuQ[b], nq)
                    poff = CuQ[b] * heads + (by * group + g) * nq
                for qb in T.serial(first, T.ceildiv(nq, block)):
                    if pitch:  # q's rows in the packed projection
                        _load_rows(Q_s, Q, ioff, ist, qb * block, nq, block, dim)
                    else:
                        _load_rows(Q_s, Q, qoff, qst, qb * block, nq, block, dim)
                    _load_rows(dO_s, dO, qoff, qst, qb * block, nq, block, dim)
                    _load_stats(lse2, delta, LSE, Delta, qoff, qst, qb * block, nq, block,
                                Flags[0], shift)
                    _recompute(tiles, qb * block, k0, nq, nk, Flags[0], scale, block, shift)
                    T.gemm(P, dO_s, dV_l, transpose_A=True)
                    T.gemm(dP, Q_s, dK_l, transpose_A=True)
                    if dq_parts:
                        T.gemm(dP, K_s, dq_l, clear_accum=True)
                        for i, d in T.Parallel(block, dim):
                            if qb * block + i < nq and pitch:
                                DQP[k0 // block, poff + qb * block + i, d] = dq_l[i, d]
                            elif qb * block + i < nq:
                                DQP[k0 // block, qoff + (qb * block + i) * qst, d] = dq_l[i, d]
            _store_rows(dK, dK_l, koff, kst, k0, nk, block, dim, sm)
            _store_rows(dV, dV_l, koff, kst, k0, nk, block, dim, 1.0)

    return attention_dkdv


@tilepy.jit
def attention_dq(heads, kv_heads, dim, block=64, dtype="float32"):
    """dQ of one query tile: KV tiles ascending."""
    group, scale, sm = heads // kv_heads, LOG2E / math.sqrt(dim), 1.0 / math.sqrt(dim)
    RQ, RK, B1, NT = _sizes()

    @T.prim_func
    def attention_dq(Q: T.Tensor((RQ, dim), dtype), K: T.Tensor((RK, dim), dtype),
                     V: T.Tensor((RK, dim), dtype), dO: T.Tensor((RQ, dim), dtype),
                     LSE: T.Tensor((RQ,), ACC), Delta: T.Tensor((RQ,), ACC),
                     CuQ: T.Tensor((B1,), "int32"), CuK: T.Tensor((B1,), "int32"),
                     Tiles: T.Tensor((NT, 2), "int32"), Flags: T.Tensor((2,), "int32"),
                     dQ: T.Tensor((RQ, dim), dtype)):
        with T.Kernel(NT, heads, threads=128) as (bx, by):
            tiles = _bwd_tiles(block, dim, dtype)
            Q_s, dO_s, K_s, V_s, scores, P, dP, lse2, delta = tiles
            dQ_l = T.alloc_fragment((block, dim), ACC)
            b, q0 = Tiles[bx, 0], Tiles[bx, 1]
            nq, nk = CuQ[b + 1] - CuQ[b], CuK[b + 1] - CuK[b]
            qoff, qst = row_offset(Flags[1], b, by, heads, CuQ[b], nq)
            koff, kst = row_offset(Flags[1], b, by // group, kv_heads, CuK[b], nk)
            _load_rows(Q_s, Q, qoff, qst, q0, nq, block, dim)
            _load_rows(dO_s, dO, qoff, qst, q0, nq, block, dim)
            shift = causal_shift(Flags[0], nq, nk)
            _load_stats(lse2, delta, LSE, Delta, qoff, qst, q0, nq, block, Flags[0], shift)
            T.clear(dQ_l)
            for kb in T.serial(T.ceildiv(_keys_seen(Flags[0], q0 + block, nk, shift), block)):
                _load_rows(K_s, K, koff, kst, kb * block, nk, block, dim)
                _load_rows(V_s, V, koff, kst, kb * block, nk, block, dim)
                _recompute(tiles, q0, kb * block, nq, nk, Flags[0], scale, block, shift)
                T.gemm(dP, K_s, dQ_l)
            _store_rows(dQ, dQ_l, qoff, qst, q0, nq, block, dim, sm)

    return attention_dq


@tilepy.jit
def attention_dq_sum(heads, dim, block=64, dtype="float32", pitch=0):
    """dQ[row] = sum over the KV tiles kt its row sees (ascending) of DQP[kt, row], / sqrt(d)."""
    sm = 1.0 / math.sqrt(dim)
    RQ, B1, NT, NKT = T.symbolic("RQ"), T.symbolic("B1"), T.symbolic("NT"), T.symbolic("NKT")
    RI = _input_rows(RQ, pitch)

    @T.prim_func
    def attention_dq_sum(DQP: T.Tensor((NKT, RQ, dim), ACC), CuQ: T.Tensor((B1,), "int32"),
                         CuK: T.Tensor((B1,), "int32"), Tiles: T.Tensor((NT, 2), "int32"),
                         Flags: T.Tensor((2,), "int32"),
                         dQ: T.Tensor((RI, dim), dtype)):
        with T.Kernel(NT, heads, threads=128) as (bx, by):
            acc = T.alloc_fragment((block, dim), ACC)
            b, q0 = Tiles[bx, 0], Tiles[bx, 1]
            nq, nk = CuQ[b + 1] - CuQ[b], CuK[b + 1] - CuK[b]
            qoff, qst = row_offset(Flags[1], b, by, heads, CuQ[b], nq)
            T.clear(acc)
            # the KV tiles attention_dkdv wrote for this query tile
            seen = _keys_seen(Flags[0], q0 + block, nk, causal_shift(Flags[0], nq, nk))
            if pitch:  # attention_dkdv's partials of the head's rows, in a row
                poff = CuQ[b] * heads + by * nq + q0
            for kt in T.serial(T.ceildiv(seen, block)):
                for i, d in T.Parallel(block, dim):
                    if q0 + i < nq and pitch:
                        acc[i, d] = acc[i, d] + DQP[kt, poff + i, d]
                    elif q0 + i < nq:
                        acc[i, d] = acc[i, d] + DQP[kt, qoff + (q0 + i) * qst, d]
            if pitch:  # q's rows in the packed projection's gradient
                ioff, ist = row_offset(Flags[1], b, by, pitch, CuQ[b], nq)
                _store_rows(dQ, acc, ioff, ist, q0, nq, block, dim, sm)
            else:
                _store_rows(dQ, acc, qoff, qst, q0, nq, block, dim, sm)

    return attention_dq_sum
