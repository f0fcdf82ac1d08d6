"""Row prefix sums: Y[i, j] = X[i, 0] + ... + X[i, j] (reverse: X[i, j] + ... + X[i, N-1]),
accumulated in float32 one element after another, so the result is the sequential scan's
whatever block_N is: each chunk of block_N columns gets the running total added to its
first element (last, reversed) before T.cumsum scans it. Columns past N read 0 (adding 0
changes nothing) and are not written.
"""

import tilepy
import tilepy.language as T

ACC = "float32"


@tilepy.jit(out_idx=[-1])
def cumsum(reverse=False, block_M=8, block_N=256, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")
    edge = block_N - 1 if reverse else 0  # where a chunk takes the carry in
    out = 0 if reverse else block_N - 1  # where it gives its total out

    @T.prim_func
    def cumsum(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), ACC)
            carry = T.alloc_fragment((block_M,), ACC)
            T.clear(carry)
            chunks = T.ceildiv(N, block_N)
            for c in T.serial(chunks):
                kc = (chunks - 1 - c) if reverse else c
                T.copy(X[bx * block_M, kc * block_N], x)
                for i in T.Parallel(block_M):
                    x[i, edge] = x[i, edge] + carry[i]
                T.cumsum(x, dim=1, reverse=reverse)
                for i in T.Parallel(block_M):
                    carry[i] = x[i, out]
                T.copy(x, Y[bx * block_M, kc * block_N])

    return cumsum
