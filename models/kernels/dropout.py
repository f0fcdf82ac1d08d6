"""Dropout with a counter-based random number generator: element i of a call with key
(seed, offset) is kept when u(i) >= p, where u is the top 24 bits of a 32-bit integer hash
(Wellons' lowbias32) of (offset + i) mixed with the hashed seed, scaled to [0, 1). The
mask is a pure function of (seed, offset, i): the backward recomputes it instead of
storing it, every backend gives the same mask, and a run is reproducible from its seed.
Y = X * keep * scale, with P = [p, scale = 1 / (1 - p)].
"""

import tilepy
import tilepy.language as T


def _mix(x):
    """lowbias32: an invertible 32-bit hash with good avalanche."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@tilepy.jit
def dropout(block=1024, dtype="float32"):
    n = T.symbolic("n")

    @T.prim_func
    def dropout(X: T.Tensor((n,), dtype), Key: T.Tensor((2,), "uint32"),
                P: T.Tensor((2,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), dtype)
            T.copy(X[bx * block], x)
            p, scale = P[0], P[1]
            seed = _mix(Key[0])
            for i in T.Parallel(block):
                h = _mix(Key[1] + T.cast(bx * block + i, "uint32") ^ seed)
                u = T.cast(h >> 8, dtype) * (1.0 / 16777216.0)
                x[i] = T.if_then_else(u >= p, x[i] * scale, 0.0)
            T.copy(x, Y[bx * block])

    return dropout
