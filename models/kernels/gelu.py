"""GELU (erf form) forward keeping the normal CDF its backward needs: `gelu_fwd` writes
Y = gelu(x) and C = 0.5 * (1 + erf(x / sqrt 2)) in the compute dtype (float32 for narrow
storage); `gelu_bwd` reads C instead of computing the erf again. Both inline the GELU
macros of elementwise.py, as unary and unary_bwd do (so their bits). Each element loop reads
and writes the global arrays where they lie (converting to and from the compute dtype as
unary's tile copies do; a load past the end gives 0 and a store there is skipped, as for
those copies): no fragment to fill and copy out, which took about a third of the launch."""

import tilepy
import tilepy.language as T
from tilepy.models.kernels.elementwise import (
    compute_dtype,
    gelu_cdf,
    gelu_erf1,
    gelu_grad,
    gelu_value,
)


@tilepy.jit
def gelu_fwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_fwd(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
                 C: T.Tensor((n,), cd)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                x = T.cast(X[bx * block + i], cd)
                e1 = gelu_erf1(x)
                C[bx * block + i] = gelu_cdf(e1)
                Y[bx * block + i] = T.cast(gelu_value(x, e1), dtype)

    return gelu_fwd


@tilepy.jit
def gelu_bwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_bwd(X: T.Tensor((n,), dtype), C: T.Tensor((n,), cd),
                 dY: T.Tensor((n,), dtype), dX: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                j = bx * block + i
                dX[j] = T.cast(gelu_grad(T.cast(X[j], cd), C[j], T.cast(dY[j], cd)), dtype)

    return gelu_bwd
