"""Embedding bag kernels: forward, the sparse weight gradient and the per-sample weights'
gradient. Bag b holds positions [Offsets[b], Offsets[b + 1]) of Idx (torch's
include_last_offset form: bags + 1 offsets); PSW weighs each position (ones unless
per-sample weights are given; sum mode only). An empty bag gives 0 in every mode. Sums
accumulate in float32 (float64 for float64 tables), ascending.

forward   Out[b] = sum of Weight[Idx[s]] * PSW[s] | that sum / the bag's size (mean) |
          max (the first maximum's position s kept in Arg[b] for the backward; NaN wins)
backward  Rows[u] = sum over the positions p of distinct index u, ascending (Order,
          Starts: the host sorts positions by index) of dOut[Bag[p]] * PSW[p] (sum),
          / size (mean), or where Arg[Bag[p]] == p (max): only the rows that occur are
          computed, no atomics. dPSW[p] = Weight[Idx[p]] . dOut[Bag[p]], d ascending.
The wrappers that sort and allocate are in embedding_bag_api.
"""

import numpy as np

import tilepy
import tilepy.language as T


def _acc(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


@tilepy.jit
def embedding_bag_fwd(mode="sum", block_D=128, dtype="float32"):
    V, D, M, B = T.symbolic("V"), T.symbolic("D"), T.symbolic("M"), T.symbolic("B")
    acc_t = _acc(dtype)

    @T.prim_func
    def embedding_bag_fwd(Weight: T.Tensor((V, D), dtype), Idx: T.Tensor((M,), "int32"),
                          Offs: T.Tensor((B + 1,), "int32"), PSW: T.Tensor((M,), dtype),
                          Out: T.Tensor((B, D), dtype), Arg: T.Tensor((B, D), "int32")):
        with T.Kernel(T.ceildiv(D, block_D), B, threads=128) as (bx, b):
            acc = T.alloc_fragment((block_D,), acc_t)
            arg = T.alloc_fragment((block_D,), "int32")
            T.clear(acc)
            T.fill(arg, -1)
            for s in T.serial(Offs[b], Offs[b + 1]):
                for j in T.Parallel(block_D):
                    c = bx * block_D + j
                    v = T.if_then_else(c < D, T.cast(Weight[Idx[s], c], acc_t), 0.0)
                    if mode == "max":  # the first maximum, or the first NaN
                        take = arg[j] < 0 or v > acc[j] or (v != v and acc[j] == acc[j])
                        arg[j] = T.if_then_else(take, s, arg[j])
                        acc[j] = T.if_then_else(take, v, acc[j])
                    else:
                        acc[j] = acc[j] + v * T.cast(PSW[s], acc_t)
            if mode == "mean":
                n = Offs[b + 1] - Offs[b]
                for j in T.Parallel(block_D):
                    acc[j] = T.if_then_else(n > 0, acc[j] / T.cast(T.max(n, 1), acc_t), 0.0)
            T.copy(acc, Out[b, bx * block_D])
            T.copy(arg, Arg[b, bx * block_D])

    return embedding_bag_fwd


@tilepy.jit
def embedding_bag_bwd(mode="sum", block_D=128, dtype="float32"):
    M, D, U, B = T.symbolic("M"), T.symbolic("D"), T.symbolic("U"), T.symbolic("B")
    acc_t = _acc(dtype)

    @T.prim_func
    def embedding_bag_bwd(dOut: T.Tensor((B, D), dtype), Order: T.Tensor((M,), "int32"),
                          Starts: T.Tensor((U + 1,), "int32"), Bag: T.Tensor((M,), "int32"),
                          Offs: T.Tensor((B + 1,), "int32"), PSW: T.Tensor((M,), dtype),
                          Arg: T.Tensor((B, D), "int32"), Rows: T.Tensor((U, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_D), U, threads=128) as (bx, u):
            acc = T.alloc_fragment((block_D,), acc_t)
            T.clear(acc)
            for s in T.serial(Starts[u], Starts[u + 1]):
                p = Order[s]
                b = Bag[p]
                for j in T.Parallel(block_D):
                    c = bx * block_D + j
                    g = T.if_then_else(c < D, T.cast(dOut[b, c], acc_t), 0.0)
                    if mode == "max":
                        acc[j] = acc[j] + T.if_then_else(Arg[b, c] == p, g, 0.0)
                    elif mode == "sum":
                        acc[j] = acc[j] + g * T.cast(PSW[p], acc_t)
                    else:
                        acc[j] = acc[j] + g / T.cast(Offs[b + 1] - Offs[b], acc_t)
            T.copy(acc, Rows[u, bx * block_D])

    return embedding_bag_bwd


@tilepy.jit
def embedding_bag_psw_grad(block_M=16, block_D=64, dtype="float32"):
    V, D, M, B = T.symbolic("V"), T.symbolic("D"), T.symbolic("M"), T.symbolic("B")
    acc_t = _acc(dtype)

    @T.prim_func
    def embedding_bag_psw_grad(Weight: T.Tensor((V, D), dtype), Idx: T.Tensor((M,), "int32"),
                               Bag: T.Tensor((M,), "int32"), dOut: T.Tensor((B, D), dtype),
                               dPSW: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            prod = T.alloc_fragment((block_M, block_D), acc_t)
            acc = T.alloc_fragment((block_M,), acc_t)
            T.clear(acc)
            for c in T.serial(T.ceildiv(D, block_D)):
                for i, j in T.Parallel(block_M, block_D):
                    p, col = bx * block_M + i, c * block_D + j
                    prod[i, j] = T.if_then_else(p < M and col < D, T.cast(
                        Weight[Idx[p], col], acc_t) * T.cast(dOut[Bag[p], col], acc_t), 0.0)
                T.reduce_sum(prod, acc, dim=1, clear=False)
            T.copy(acc, dPSW[bx * block_M])

    return embedding_bag_psw_grad


def embedding_bag(mode="sum", block_D=128, dtype="float32"):
    """The forward as `f(weight, idx, offsets) -> out` (unit per-sample weights): the
    library's first embedding-bag entry point, kept for its callers."""
    kern = embedding_bag_fwd(mode, block_D, dtype)

    def run(weight, idx, offsets):
        out = np.empty((offsets.size - 1, weight.shape[1]), weight.dtype)
        kern(weight, idx, offsets, np.ones(idx.shape, weight.dtype), out,
             np.empty(out.shape, np.int32))
        return out
    return run
