"""Tiled gemm: C = op(A) @ op(B), op a transpose or not; any input dtype, fp32 accumulation.

The classic TileLang form: a Pipelined k-loop of global -> shared copies and a T.gemm into a
fragment accumulator, then one copy out. Sizes are symbolic; edge tiles are zero-filled on
read and clipped on write by the copy semantics.
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1], empty_outputs=True)  # every C tile is copied out, edges clipped
def gemm(block_M=64, block_N=64, block_K=32, in_dtype="float16", out_dtype="float32",
         accum_dtype="float32", trans_A=False, trans_B=False, num_stages=2):
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
    a_shape, a_tile = ((K, M), (block_K, block_M)) if trans_A else ((M, K), (block_M, block_K))
    b_shape, b_tile = ((N, K), (block_N, block_K)) if trans_B else ((K, N), (block_K, block_N))

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, in_dtype), B: T.Tensor(b_shape, in_dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared(a_tile, in_dtype)
            B_shared = T.alloc_shared(b_tile, in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


@tilepy.jit
def gemm_split_k(block_M=64, block_N=64, block_K=32, splits=4):
    """C += A @ B (float32) with K cut into `splits` slices: one block per (C tile, slice),
    each adding its partial tile into C with T.atomic_add. The adds to one tile apply in
    block order (slice order), so the result is deterministic; the caller passes C (zero
    for a plain product)."""
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")

    @T.prim_func
    def gemm_split_k(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"),
                     C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits) as (bx, by, bz):
            a_s = T.alloc_shared((block_M, block_K), "float32")
            b_s = T.alloc_shared((block_K, block_N), "float32")
            c_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(c_l)
            per = T.ceildiv(K, block_K * splits)
            for ko in T.Pipelined(per, num_stages=2):
                T.copy(A[by * block_M, (bz * per + ko) * block_K], a_s)
                T.copy(B[(bz * per + ko) * block_K, bx * block_N], b_s)
                T.gemm(a_s, b_s, c_l)
            T.atomic_add(C[by * block_M, bx * block_N], c_l)

    return gemm_split_k
