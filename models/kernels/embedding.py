"""Embedding lookup and its gradient.

forward   Out[i, :] = Weight[Idx[i], :]
backward  Rows[u, :] = sum over s in [Starts[u], Starts[u+1]) of dOut[Order[s], :]: the
          gradient of each distinct index u, summing its occurrences in ascending position
          order (the op sorts positions by index: Order, Starts), so no atomics and no
          dependence on the schedule. The models compute every row of the table (U is
          the table's rows; a row that does not occur gets 0): models/nn/indices.py.
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def embedding_fwd(block_M=8, block_D=128, dtype="float32"):
    V, D, M = T.symbolic("V"), T.symbolic("D"), T.symbolic("M")

    @T.prim_func
    def embedding_fwd(Weight: T.Tensor((V, D), dtype), Idx: T.Tensor((M,), "int32"),
                      Out: T.Tensor((M, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_D), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_D):
                r, c = by * block_M + i, bx * block_D + j
                if r < M and c < D:
                    Out[r, c] = Weight[Idx[r], c]

    return embedding_fwd


@tilepy.jit
def embedding_bwd(block_D=128, dtype="float32"):
    M, D, U = T.symbolic("M"), T.symbolic("D"), T.symbolic("U")

    @T.prim_func
    def embedding_bwd(dOut: T.Tensor((M, D), dtype), Order: T.Tensor((M,), "int32"),
                      Starts: T.Tensor((U + 1,), "int32"), Rows: T.Tensor((U, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_D), U, threads=128) as (bx, u):
            acc = T.alloc_fragment((block_D,), dtype)
            T.clear(acc)
            for s in T.serial(Starts[u], Starts[u + 1]):
                for j in T.Parallel(block_D):
                    c = bx * block_D + j
                    acc[j] = acc[j] + T.if_then_else(c < D, dOut[Order[s], c], 0.0)
            T.copy(acc, Rows[u, bx * block_D])

    return embedding_bwd
