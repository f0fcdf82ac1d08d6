"""Row top-k: the k largest values of each row of X (M, N), descending, with their column
indices. Ties go to the lowest index (a later equal value never displaces an earlier one);
NaN ranks above every number (as torch.topk), NaNs among themselves by index. One block
per block_M rows; each row keeps a sorted list of k and inserts by shifting (k * N
comparisons at worst: meant for small k).
"""

import tilepy
import tilepy.language as T


def _above(a, b):
    """a ranks strictly above b: larger, or a NaN over a number."""
    return T.if_then_else(a != a, b == b, a > b)


@tilepy.jit(out_idx=[-2, -1])
def topk(k, block_M=8, dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def topk(X: T.Tensor((M, N), dtype), Vals: T.Tensor((M, k), dtype),
             Idx: T.Tensor((M, k), "int32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            vals = T.alloc_local((k,), dtype)
            idx = T.alloc_local((k,), "int32")
            st = T.alloc_local((2,), "int32")  # [values held, insertion point]
            for i in T.serial(block_M):
                r = bx * block_M + i
                if r < M:
                    T.fill(vals, -T.infinity(dtype))
                    T.fill(idx, -1)
                    st[0] = 0
                    for j in T.serial(N):
                        x = X[r, j]
                        if st[0] < k or _above(x, vals[k - 1]):
                            st[1] = T.min(st[0], k - 1)
                            while st[1] > 0 and _above(x, vals[T.max(st[1] - 1, 0)]):
                                vals[st[1]] = vals[st[1] - 1]
                                idx[st[1]] = idx[st[1] - 1]
                                st[1] = st[1] - 1
                            vals[st[1]] = x
                            idx[st[1]] = j
                            st[0] = T.min(st[0] + 1, k)
                    for t in T.Parallel(k):
                        Vals[r, t] = vals[t]
                        Idx[r, t] = idx[t]

    return topk
