"""Dequantising gemm: C = A @ dequant(B)^T with B in fp4 e2m1, two codes per byte:
B_packed[n, k // 2] holds code k in its low nibble when k is even, in its high nibble when
k is odd. The kernel expands each code to bfloat16 bits (sign, exponent e + 126, one
mantissa bit; e = 0 is the subnormal 0.5 * m), reinterprets them and multiplies with bf16 A
in fp32.
"""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def dequant_gemm_fp4(block_M=64, block_N=64, block_K=64, out_dtype="float32", num_stages=2):
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
    half_K = T.symbolic("half_K")

    @T.prim_func
    def dequant_gemm_fp4(A: T.Tensor((M, K), "bfloat16"),
                         B_packed: T.Tensor((N, half_K), "uint8"),
                         C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "bfloat16")
            packed = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), "bfloat16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B_packed[bx * block_N, k * (block_K // 2)], packed)
                for i, j in T.Parallel(block_N, block_K):
                    byte = T.cast(packed[i, j // 2], "int32")
                    code = (byte >> ((j % 2) * 4)) & 15
                    e = (code >> 1) & 3
                    m = code & 1
                    bits = T.if_then_else(e == 0, m * 0x3F00, ((e + 126) << 7) | (m << 6))
                    bits = bits | ((code >> 3) << 15)
                    B_s[i, j] = T.reinterpret(T.cast(bits, "uint16"), "bfloat16")
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[by * block_M, bx * block_N])

    return dequant_gemm_fp4
