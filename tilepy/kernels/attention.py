"""Flash-attention forward of fixed shape: O = softmax(Q K^T / sqrt(D)) V, causal or not
(True, 'top_left' or 'bottom_right': one mask, the lengths being equal), one pass over
(batch, heads, seq_len, dim) arrays whose sizes are compile-time constants.

Grid: (query blocks, heads, batch). The scores and the online softmax are flash_attn's
(masked_scores, online_softmax_state/_step): this module only loads the 4-d layout's
tiles and stores O, so it computes what `attention_api.attention` computes, bit for bit.
"""

import math

import tilepy
import tilepy.language as T
from tilepy.kernels.attn_layout import causal_mode
from tilepy.kernels.flash_attn import masked_scores, online_softmax_state, online_softmax_step


@tilepy.jit(out_idx=[-1])
def flash_attention(batch, heads, seq_len, dim, causal=False, block_M=64, block_N=64,
                    dtype="float32", num_stages=1):
    shape = (batch, heads, seq_len, dim)
    # queries and keys have one length: both alignments are the same mask
    causal = causal_mode(causal) != 0
    scale = (1.0 / math.sqrt(dim)) * math.log2(math.e)
    # keys past the end (or, causal, after the query) need -inf; rows past the end are
    # never stored, so with neither the kernel has no mask at all
    masked = causal or seq_len % block_N != 0

    @T.prim_func
    def flash_attention(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype),
                        V: T.Tensor(shape, dtype), O: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=128) as (bx, by, bz):
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            state = online_softmax_state(block_M, block_N, dim, dtype)
            scores, probs, acc_o, m_new, m_old, rescale, block_sum, denom = state
            T.copy(Q[bz, by, bx * block_M:(bx + 1) * block_M, :], Q_s)
            n_blocks = T.ceildiv((bx + 1) * block_M, block_N) if causal else \
                T.ceildiv(seq_len, block_N)
            for k in T.Pipelined(n_blocks, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N:(k + 1) * block_N, :], K_s)
                masked_scores(scores, Q_s, K_s, bx * block_M, k * block_N, seq_len, seq_len,
                              int(causal), block_M, block_N, masked)
                T.copy(V[bz, by, k * block_N:(k + 1) * block_N, :], V_s)
                online_softmax_step(state, V_s, scale, dtype, block_M, block_N, dim)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= denom[i]
            T.copy(acc_o, O[bz, by, bx * block_M:(bx + 1) * block_M, :])

    return flash_attention
