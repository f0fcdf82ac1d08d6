"""GELU (erf form) forward keeping the normal CDF its backward needs: `gelu_fwd` writes
Y = gelu(x) with unary's formula (so its bits) and C = 0.5 * (1 + erf(x / sqrt 2)) in the
compute dtype (float32 for narrow storage); `gelu_bwd` reads C instead of computing the
erf again, with unary_bwd's formula otherwise (so its bits)."""

import tilepy
import tilepy.language as T
from tilepy.models.kernels.elementwise import _RSQRT2, _RSQRT2PI, compute_dtype


@tilepy.jit
def gelu_fwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_fwd(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
                 C: T.Tensor((n,), cd)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), cd)
            c = T.alloc_fragment((block,), cd)
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                e = T.erf(x[i] * _RSQRT2)
                c[i] = 0.5 * (1.0 + e)
                x[i] = 0.5 * x[i] * (1.0 + e)
            T.copy(x, Y[bx * block])
            T.copy(c, C[bx * block])

    return gelu_fwd


@tilepy.jit
def gelu_bwd(block=1024, dtype="float32"):
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def gelu_bwd(X: T.Tensor((n,), dtype), C: T.Tensor((n,), cd),
                 dY: T.Tensor((n,), dtype), dX: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), cd)
            c = T.alloc_fragment((block,), cd)
            g = T.alloc_fragment((block,), cd)
            T.copy(X[bx * block], x)
            T.copy(C[bx * block], c)
            T.copy(dY[bx * block], g)
            for i in T.Parallel(block):
                pdf = T.exp(-0.5 * x[i] * x[i]) * _RSQRT2PI
                g[i] = g[i] * (c[i] + x[i] * pdf)
            T.copy(g, dX[bx * block])

    return gelu_bwd
