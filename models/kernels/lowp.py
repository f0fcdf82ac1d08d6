"""Low-precision linear layers' kernels: quantising a float32 tensor to a narrow format
with a per-tensor scale (and measuring it), and a gemm over two narrow operands (their
formats may differ: e4m3 activations and weights, e5m2 gradients) whose float32
accumulator is multiplied by the product of the operands' inverse scales before the store.

quantize  Q[i] = cast(X[i] * P[0], fmt, saturate); per block: Stats[b] = [max |X|,
          count of |X * P[0]| > P[1] (overflow), count of 0 < |X * P[0]| < P[2]
          (underflow)]: the amax feeds delayed scaling; the counts, taken against the
          thresholds the caller passes (its own format's or a narrower one's), feed
          dynamic precision switching.
gemm      C = (op(A) @ op(B)) * Sc[0]: products in float32 (exact for fp8 and bf16
          inputs), k ascending, one rounding per add (the DESIGN gemm contract).
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def quantize(block=1024, fmt="float8_e4m3fn"):
    M, NB = T.symbolic("M"), T.symbolic("NB")

    @T.prim_func
    def quantize(X: T.Tensor((M,), "float32"), P: T.Tensor((3,), "float32"),
                 Q: T.Tensor((M,), fmt), Stats: T.Tensor((NB, 3), "float32")):
        with T.Kernel(NB, threads=128) as bx:
            a = T.alloc_fragment((block,), "float32")
            over = T.alloc_fragment((block,), "float32")
            under = T.alloc_fragment((block,), "float32")
            r = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(block):
                e = bx * block + i
                v = T.if_then_else(e < M, X[e], 0.0)
                s = v * P[0]
                Q[e] = T.cast(s, fmt, saturate=True)
                a[i] = T.abs(v)
                over[i] = T.if_then_else(T.abs(s) > P[1], 1.0, 0.0)
                under[i] = T.if_then_else(T.abs(s) > 0.0 and T.abs(s) < P[2], 1.0, 0.0)
            T.reduce_max(a, r, dim=0)
            Stats[bx, 0] = r[0]
            T.reduce_sum(over, r, dim=0)
            Stats[bx, 1] = r[0]
            T.reduce_sum(under, r, dim=0)
            Stats[bx, 2] = r[0]

    return quantize


@tilepy.jit
def scaled_gemm(a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", trans_A=False,
                trans_B=False, block_M=64, block_N=64, block_K=32):
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
    a_shape, a_tile = ((K, M), (block_K, block_M)) if trans_A else ((M, K), (block_M, block_K))
    b_shape, b_tile = ((N, K), (block_N, block_K)) if trans_B else ((K, N), (block_K, block_N))

    @T.prim_func
    def scaled_gemm(A: T.Tensor(a_shape, a_dtype), B: T.Tensor(b_shape, b_dtype),
                    Sc: T.Tensor((1,), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared(a_tile, a_dtype)
            B_shared = T.alloc_shared(b_tile, b_dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, acc, transpose_A=trans_A, transpose_B=trans_B)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = acc[i, j] * Sc[0]
            T.copy(acc, C[by * block_M, bx * block_N])

    return scaled_gemm
