"""Elementwise kernels over flat arrays (broadcast operands are materialised by the op
first): `unary` (activations and the affine map a*x + b), `unary_bwd` (their derivatives),
`binary` (+ - * / max and the ReLU mask). The formula is picked at run time by a one-element
int32 op code, so each kernel compiles once per dtype and serves every op and every size.
Arithmetic is in the storage dtype, except that narrow storage (bfloat16, float16) is
computed in float32 and rounded once at the store (torch's CPU semantics for these dtypes);
transcendentals in float64, rounded once (the contract). `convert` casts between dtypes.
"""

import math

import tilepy
import tilepy.language as T

# unary op codes (forward: unary, backward: unary_bwd)
AFFINE, RELU, GELU, SILU, TANH, SIGMOID, EXP, LOG, RSQRT = range(9)
UNARY = {"affine": AFFINE, "relu": RELU, "gelu": GELU, "silu": SILU, "tanh": TANH,
         "sigmoid": SIGMOID, "exp": EXP, "log": LOG, "rsqrt": RSQRT}
# binary op codes
ADD, SUB, MUL, DIV, MAXIMUM, RELU_MASK = range(6)
BINARY = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV, "maximum": MAXIMUM,
          "relu_mask": RELU_MASK}
NARROW = ("bfloat16", "float16")  # storage dtypes whose arithmetic is float32's
_RSQRT2 = 1.0 / math.sqrt(2.0)
_RSQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def compute_dtype(dtype: str) -> str:
    """The dtype a kernel computes in for `dtype` storage."""
    return "float32" if dtype in NARROW else dtype


# GELU (erf form), defined once: unary, unary_bwd and models/kernels/gelu.py inline these.
@T.macro
def gelu_erf1(x):
    """1 + erf(x / sqrt 2), twice the normal CDF at x."""
    return 1.0 + T.erf(x * _RSQRT2)


@T.macro
def gelu_value(x, erf1):
    """gelu(x) = x * CDF(x), computed as 0.5 * x * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * erf1


@T.macro
def gelu_cdf(erf1):
    """The normal CDF at x from gelu_erf1(x)."""
    return 0.5 * erf1


@T.macro
def gelu_grad(x, cdf, g):
    """g * gelu'(x) = g * (CDF(x) + x * pdf(x))."""
    return g * (cdf + x * (T.exp(-0.5 * x * x) * _RSQRT2PI))


@tilepy.jit
def unary(block=1024, dtype="float32"):
    """Y = f(X): affine (P[0] * x + P[1]), relu, gelu (erf form), silu, tanh, sigmoid,
    exp, log, rsqrt (of P[0] * x + P[1]); the op is Op[0]."""
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def unary(X: T.Tensor((n,), dtype), Op: T.Tensor((1,), "int32"),
              P: T.Tensor((2,), cd), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), cd)
            T.copy(X[bx * block], x)
            op = Op[0]
            a, b = P[0], P[1]
            if op == AFFINE:
                for i in T.Parallel(block):
                    x[i] = a * x[i] + b
            elif op == RELU:
                for i in T.Parallel(block):
                    x[i] = T.if_then_else(x[i] > 0.0, x[i], 0.0)
            elif op == GELU:
                for i in T.Parallel(block):
                    x[i] = gelu_value(x[i], gelu_erf1(x[i]))
            elif op == SILU:
                for i in T.Parallel(block):
                    x[i] = x[i] * T.sigmoid(x[i])
            elif op == TANH:
                for i in T.Parallel(block):
                    x[i] = T.tanh(x[i])
            elif op == SIGMOID:
                for i in T.Parallel(block):
                    x[i] = T.sigmoid(x[i])
            elif op == EXP:
                for i in T.Parallel(block):
                    x[i] = T.exp(x[i])
            elif op == LOG:
                for i in T.Parallel(block):
                    x[i] = T.log(x[i])
            else:
                for i in T.Parallel(block):
                    x[i] = T.rsqrt(a * x[i] + b)
            T.copy(x, Y[bx * block])

    return unary


@tilepy.jit
def unary_bwd(block=1024, dtype="float32"):
    """dX = dY * f'(x) for the ops of `unary`, given X and the forward's output Y."""
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def unary_bwd(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
                  dY: T.Tensor((n,), dtype), Op: T.Tensor((1,), "int32"),
                  P: T.Tensor((2,), cd), dX: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), cd)
            y = T.alloc_fragment((block,), cd)
            g = T.alloc_fragment((block,), cd)
            T.copy(X[bx * block], x)
            T.copy(Y[bx * block], y)
            T.copy(dY[bx * block], g)
            op = Op[0]
            a = P[0]
            if op == AFFINE:
                for i in T.Parallel(block):
                    g[i] = g[i] * a
            elif op == RELU:
                for i in T.Parallel(block):
                    g[i] = T.if_then_else(x[i] > 0.0, g[i], 0.0)
            elif op == GELU:
                for i in T.Parallel(block):
                    g[i] = gelu_grad(x[i], gelu_cdf(gelu_erf1(x[i])), g[i])
            elif op == SILU:
                for i in T.Parallel(block):
                    s = T.sigmoid(x[i])
                    g[i] = g[i] * (s * (1.0 + x[i] * (1.0 - s)))
            elif op == TANH:
                for i in T.Parallel(block):
                    g[i] = g[i] * (1.0 - y[i] * y[i])
            elif op == SIGMOID:
                for i in T.Parallel(block):
                    g[i] = g[i] * (y[i] * (1.0 - y[i]))
            elif op == EXP:
                for i in T.Parallel(block):
                    g[i] = g[i] * y[i]
            elif op == LOG:
                for i in T.Parallel(block):
                    g[i] = g[i] / x[i]
            else:
                for i in T.Parallel(block):
                    g[i] = g[i] * (-0.5 * a * y[i] * y[i] * y[i])
            T.copy(g, dX[bx * block])

    return unary_bwd


@tilepy.jit
def binary(block=1024, dtype="float32"):
    """Z = X op Y elementwise: add, sub, mul, div, maximum, relu_mask (x where y > 0,
    else 0); the op is Op[0]. Z may be X itself (accumulating a gradient in place)."""
    n, cd = T.symbolic("n"), compute_dtype(dtype)

    @T.prim_func
    def binary(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype),
               Op: T.Tensor((1,), "int32"), Z: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            x = T.alloc_fragment((block,), cd)
            y = T.alloc_fragment((block,), cd)
            T.copy(X[bx * block], x)
            T.copy(Y[bx * block], y)
            op = Op[0]
            if op == ADD:
                for i in T.Parallel(block):
                    x[i] = x[i] + y[i]
            elif op == SUB:
                for i in T.Parallel(block):
                    x[i] = x[i] - y[i]
            elif op == MUL:
                for i in T.Parallel(block):
                    x[i] = x[i] * y[i]
            elif op == DIV:
                for i in T.Parallel(block):
                    x[i] = x[i] / y[i]
            elif op == MAXIMUM:
                for i in T.Parallel(block):
                    x[i] = T.max(x[i], y[i])
            else:
                for i in T.Parallel(block):
                    x[i] = T.if_then_else(y[i] > 0.0, x[i], 0.0)
            T.copy(x, Z[bx * block])

    return binary


@tilepy.jit
def convert(block=1024, src="float32", dst="bfloat16"):
    """Y = X in dtype dst: widening is exact, narrowing rounds to nearest even once."""
    n = T.symbolic("n")

    @T.prim_func
    def convert(X: T.Tensor((n,), src), Y: T.Tensor((n,), dst)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                e = bx * block + i
                if e < n:
                    Y[e] = T.cast(X[e], dst)

    return convert


@tilepy.jit
def binary_rows(block_M=16, block_N=64, dtype="float32"):
    """Z = X op Y with Y (N,) broadcast over X's M rows (a bias, a norm's weight), without
    materialising the broadcast; the ops and codes of `binary`, the same formula per
    element (so the same bits)."""
    M, N, cd = T.symbolic("M"), T.symbolic("N"), compute_dtype(dtype)

    @T.prim_func
    def binary_rows(X: T.Tensor((M, N), dtype), Y: T.Tensor((N,), dtype),
                    Op: T.Tensor((1,), "int32"), Z: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), cd)
            y = T.alloc_fragment((block_N,), cd)
            T.copy(X[by * block_M, bx * block_N], x)
            T.copy(Y[bx * block_N], y)
            op = Op[0]
            if op == ADD:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] + y[j]
            elif op == SUB:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] - y[j]
            elif op == MUL:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] * y[j]
            elif op == DIV:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] / y[j]
            elif op == MAXIMUM:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.max(x[i, j], y[j])
            else:
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.if_then_else(y[j] > 0.0, x[i, j], 0.0)
            T.copy(x, Z[by * block_M, bx * block_N])

    return binary_rows
