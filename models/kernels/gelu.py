"""GELU (erf form) forward keeping the normal CDF its backward needs: `gelu_fwd` writes
Y = gelu(x) and C = 0.5 * (1 + erf(x / sqrt 2)) in the compute dtype (float32 for narrow
storage); `gelu_bwd` reads C instead of computing the erf again. Both inline the GELU
macros of elementwise.py, as unary and unary_bwd do (so their bits). Their element loops read
and write the global arrays where they lie (converting to and from the compute dtype as
unary's tile copies do; whole blocks loop without a test, the last block skips its elements
past the end, so strict mode has nothing to refuse): no fragment to fill and copy out,
which took about a third of the launch.
`gelu_bias_fwd` (a Linear's bias, then GELU) works on 2-d row tiles."""

import tilepy
import tilepy.language as T
from tilepy.models.kernels.elementwise import (
    compute_dtype,
    gelu_cdf,
    gelu_erf1,
    gelu_grad,
    gelu_value,
)


@T.macro
def _fwd_at(X, Y, C, j, cd, dtype):
    """Element j of gelu_fwd: Y[j] = gelu(X[j]), C[j] its CDF, in the compute dtype cd."""
    x = T.cast(X[j], cd)
    e1 = gelu_erf1(x)
    C[j] = gelu_cdf(e1)
    Y[j] = T.cast(gelu_value(x, e1), dtype)


@T.macro
def _bwd_at(X, C, dY, dX, j, cd, dtype):
    """Element j of gelu_bwd: dX[j] = dY[j] * gelu'(X[j]) from the kept CDF."""
    dX[j] = T.cast(gelu_grad(T.cast(X[j], cd), C[j], T.cast(dY[j], cd)), dtype)


@tilepy.jit
def gelu_fwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_fwd(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
                 C: T.Tensor((n,), cd)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            if bx * block + block <= n:  # a whole block: no test per element
                for i in T.Parallel(block):
                    _fwd_at(X, Y, C, bx * block + i, cd, dtype)
            else:  # the last block's tail (strict mode refuses accesses past the end)
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        _fwd_at(X, Y, C, bx * block + i, cd, dtype)

    return gelu_fwd


@tilepy.jit
def gelu_bwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_bwd(X: T.Tensor((n,), dtype), C: T.Tensor((n,), cd),
                 dY: T.Tensor((n,), dtype), dX: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            if bx * block + block <= n:
                for i in T.Parallel(block):
                    _bwd_at(X, C, dY, dX, bx * block + i, cd, dtype)
            else:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        _bwd_at(X, C, dY, dX, bx * block + i, cd, dtype)

    return gelu_bwd


@tilepy.jit
def gelu_bias_fwd(block_M=16, block_N=64, dtype="float32"):
    """A linear layer's bias and GELU in one pass over its (M, N) output X: X = X + B
    in place (B (N,) broadcast over the rows; binary_rows' bits, so rounded to the
    storage dtype), then Y = gelu(X) and C its CDF from that stored value (gelu_fwd's)."""
    M, N, cd = T.symbolic("M"), T.symbolic("N"), compute_dtype(dtype)

    @T.prim_func
    def gelu_bias_fwd(X: T.Tensor((M, N), dtype), B: T.Tensor((N,), dtype),
                      Y: T.Tensor((M, N), dtype), C: T.Tensor((M, N), cd)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), cd)
            b = T.alloc_fragment((block_N,), cd)
            c = T.alloc_fragment((block_M, block_N), cd)
            T.copy(X[by * block_M, bx * block_N], x)
            T.copy(B[bx * block_N], b)
            for i, j in T.Parallel(block_M, block_N):
                x[i, j] = stored(x[i, j] + b[j], dtype, cd)
            T.copy(x, X[by * block_M, bx * block_N])
            for i, j in T.Parallel(block_M, block_N):
                e1 = gelu_erf1(x[i, j])
                c[i, j] = gelu_cdf(e1)
                x[i, j] = gelu_value(x[i, j], e1)
            T.copy(x, Y[by * block_M, bx * block_N])
            T.copy(c, C[by * block_M, bx * block_N])

    return gelu_bias_fwd


@T.macro
def stored(v, dtype, cd):
    """v (computed in cd) as storing it in `dtype` leaves it, back in cd."""
    if dtype == cd:
        return v
    return T.cast(T.cast(v, dtype), cd)
