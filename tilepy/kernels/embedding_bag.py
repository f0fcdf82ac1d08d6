"""Embedding bag: Out[b] = reduce over s in [Offsets[b], Offsets[b + 1]) of Weight[Idx[s]],
reduce one of sum (ascending s, float32), mean (that sum / the bag's size) and max; an
empty bag gives 0 in every mode (as torch.nn.functional.embedding_bag). Offsets has
bags + 1 entries (torch's include_last_offset form). One block per bag and column tile.
"""

import math

import tilepy
import tilepy.language as T

ACC = "float32"


@tilepy.jit(out_idx=[-1])
def embedding_bag(mode="sum", block_D=128, dtype="float32"):
    V, D, NI, NB = T.symbolic("V"), T.symbolic("D"), T.symbolic("NI"), T.symbolic("NB")
    start = -math.inf if mode == "max" else 0.0

    @T.prim_func
    def embedding_bag(Weight: T.Tensor((V, D), dtype), Idx: T.Tensor((NI,), "int32"),
                      Offsets: T.Tensor((NB + 1,), "int32"), Out: T.Tensor((NB, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_D), NB, threads=128) as (bx, b):
            acc = T.alloc_fragment((block_D,), ACC)
            T.fill(acc, start)
            for s in T.serial(Offsets[b], Offsets[b + 1]):
                for j in T.Parallel(block_D):
                    w = Weight[Idx[s], bx * block_D + j]
                    acc[j] = T.max(acc[j], w) if mode == "max" else acc[j] + w
            count = Offsets[b + 1] - Offsets[b]
            for j in T.Parallel(block_D):
                if mode == "mean":
                    acc[j] = acc[j] / T.cast(T.max(count, 1), ACC)
                Out[b, bx * block_D + j] = T.if_then_else(count > 0, acc[j], 0.0)

    return embedding_bag
