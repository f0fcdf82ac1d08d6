"""EmbeddingBag: a reduction (sum, mean or max) of embedding rows per bag, and its sparse
gradient. Bag b holds positions [Offs[b], Offs[b+1]) of Idx; PSW weighs each position
(ones unless per_sample_weights are given; sum mode only). An empty bag gives zeros.

forward   Out[b, :] = reduce over s in bag b of Weight[Idx[s], :] (* PSW[s] for sum;
          mean divides the sum by the bag's size; max keeps the first maximum's position
          s in Arg[b, :] for the backward)
backward  Rows[u, :] = sum over the positions p of distinct index u, ascending (Order,
          Starts as for embedding) of dOut[Bag[p], :] * PSW[p] (sum), / size (mean), or
          where Arg[Bag[p], :] == p (max): only the rows that occur are computed, no atomics.
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def embedding_bag_fwd(mode="sum", block_D=128, dtype="float32"):
    V, D, M, B = T.symbolic("V"), T.symbolic("D"), T.symbolic("M"), T.symbolic("B")

    @T.prim_func
    def embedding_bag_fwd(Weight: T.Tensor((V, D), dtype), Idx: T.Tensor((M,), "int32"),
                          Offs: T.Tensor((B + 1,), "int32"), PSW: T.Tensor((M,), dtype),
                          Out: T.Tensor((B, D), dtype), Arg: T.Tensor((B, D), "int32")):
        with T.Kernel(T.ceildiv(D, block_D), B, threads=128) as (bx, b):
            acc = T.alloc_fragment((block_D,), dtype)
            arg = T.alloc_fragment((block_D,), "int32")
            for j in T.Parallel(block_D):
                acc[j] = 0.0
                arg[j] = -1
            for s in T.serial(Offs[b], Offs[b + 1]):
                for j in T.Parallel(block_D):
                    c = bx * block_D + j
                    v = T.if_then_else(c < D, Weight[Idx[s], c], 0.0)
                    if mode == "max":
                        take = arg[j] < 0 or v > acc[j]
                        arg[j] = T.if_then_else(take, s, arg[j])
                        acc[j] = T.if_then_else(take, v, acc[j])
                    elif mode == "sum":
                        acc[j] = acc[j] + v * PSW[s]
                    else:
                        acc[j] = acc[j] + v
            if mode == "mean":
                n = Offs[b + 1] - Offs[b]
                for j in T.Parallel(block_D):
                    acc[j] = T.if_then_else(n > 0, acc[j] / T.cast(T.max(n, 1), dtype), 0.0)
            T.copy(acc, Out[b, bx * block_D])
            T.copy(arg, Arg[b, bx * block_D])

    return embedding_bag_fwd


@tilepy.jit
def embedding_bag_bwd(mode="sum", block_D=128, dtype="float32"):
    M, D, U, B = T.symbolic("M"), T.symbolic("D"), T.symbolic("U"), T.symbolic("B")

    @T.prim_func
    def embedding_bag_bwd(dOut: T.Tensor((B, D), dtype), Order: T.Tensor((M,), "int32"),
                          Starts: T.Tensor((U + 1,), "int32"), Bag: T.Tensor((M,), "int32"),
                          Offs: T.Tensor((B + 1,), "int32"), PSW: T.Tensor((M,), dtype),
                          Arg: T.Tensor((B, D), "int32"), Rows: T.Tensor((U, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_D), U, threads=128) as (bx, u):
            acc = T.alloc_fragment((block_D,), dtype)
            T.clear(acc)
            for s in T.serial(Starts[u], Starts[u + 1]):
                p = Order[s]
                b = Bag[p]
                for j in T.Parallel(block_D):
                    c = bx * block_D + j
                    g = T.if_then_else(c < D, dOut[b, c], 0.0)
                    if mode == "max":
                        acc[j] = acc[j] + T.if_then_else(Arg[b, c] == p, g, 0.0)
                    elif mode == "sum":
                        acc[j] = acc[j] + g * PSW[p]
                    else:
                        acc[j] = acc[j] + g / T.cast(Offs[b + 1] - Offs[b], dtype)
            T.copy(acc, Rows[u, bx * block_D])

    return embedding_bag_bwd
