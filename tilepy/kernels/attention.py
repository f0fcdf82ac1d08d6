"""Flash-attention forward: O = softmax(Q K^T / sqrt(D)) V, causal or not, one pass.

Grid: (query blocks, heads, batch). Scores are kept in base 2 (exp2 with log2(e) folded into
the scale), the running max and sum rescale the accumulator (the online softmax). Keys past
the sequence end and, when causal, keys after the query are masked to -inf before the max.
"""

import math

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def flash_attention(batch, heads, seq_len, dim, causal=False, block_M=64, block_N=64,
                    dtype="float32", num_stages=1):
    shape = (batch, heads, seq_len, dim)
    scale = (1.0 / math.sqrt(dim)) * math.log2(math.e)
    acc = "float32"
    neg_inf = -math.inf
    masked = causal or seq_len % block_N != 0  # else no score needs -inf

    @T.prim_func
    def flash_attention(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype),
                        V: T.Tensor(shape, dtype), O: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=128) as (bx, by, bz):
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            scores = T.alloc_fragment((block_M, block_N), acc)
            probs = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), acc)
            m_new = T.alloc_fragment((block_M,), acc)
            m_old = T.alloc_fragment((block_M,), acc)
            rescale = T.alloc_fragment((block_M,), acc)
            block_sum = T.alloc_fragment((block_M,), acc)
            denom = T.alloc_fragment((block_M,), acc)

            T.copy(Q[bz, by, bx * block_M:(bx + 1) * block_M, :], Q_s)
            T.clear(acc_o)
            T.clear(denom)
            T.fill(m_new, neg_inf)
            n_blocks = T.ceildiv((bx + 1) * block_M, block_N) if causal else \
                T.ceildiv(seq_len, block_N)
            for k in T.Pipelined(n_blocks, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N:(k + 1) * block_N, :], K_s)
                if masked:
                    for i, j in T.Parallel(block_M, block_N):
                        key, query = k * block_N + j, bx * block_M + i
                        visible = (key <= query) if causal else True
                        scores[i, j] = T.if_then_else(visible and key < seq_len, 0.0, neg_inf)
                    T.gemm(Q_s, K_s, scores, transpose_B=True)
                else:  # every key visible: the same sums from a cleared accumulator
                    T.gemm(Q_s, K_s, scores, transpose_B=True, clear_accum=True)
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
                T.copy(V[bz, by, k * block_N:(k + 1) * block_N, :], V_s)
                if dtype == acc:  # probs would be a copy of scores: use them as they are
                    T.gemm(scores, V_s, acc_o)
                else:
                    T.copy(scores, probs)
                    T.gemm(probs, V_s, acc_o)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= denom[i]
            T.copy(acc_o, O[bz, by, bx * block_M:(bx + 1) * block_M, :])

    return flash_attention
