"""Tile ops the tests run: the issue's matmul verbatim, and one op per construct."""
# ruff: noqa: F821  (i, j, b are the outputs' index names: free in a tile op body by design)

import math

import tilepy.language as T
from tilepy import Tensor, tile_op

M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")


@tile_op
def matmul(a: Tensor[M, K], b: Tensor[K, N]) -> Tensor[M, N]:
    return sum(a[i, k] * b[k, j] for k in range(K))


@tile_op
def matmul_tt(a: Tensor[K, M, "bfloat16"], b: Tensor[N, K, "bfloat16"]) -> Tensor[M, N]:
    return sum(a[k, i] * b[j, k] for k in range(K))


@tile_op
def matmul_bf16(a: Tensor[M, K, "bfloat16"], b: Tensor[K, N, "bfloat16"]) \
        -> Tensor[M, N, "bfloat16"]:
    return sum(a[i, k] * b[k, j] for k in range(K))


@tile_op
def softmax(x: Tensor[M, N]) -> Tensor[M, N]:
    m = max(x[i, k] for k in range(N))
    return T.exp(x[i, j] - m) / sum(T.exp(x[i, k] - m) for k in range(N))


@tile_op
def layernorm(x: Tensor[M, N], g: Tensor[N], b: Tensor[N]) -> Tensor[M, N]:
    mean = sum(x[i, k] for k in range(N)) / T.cast(N, "float32")
    var = sum((x[i, k] - mean) * (x[i, k] - mean) for k in range(N)) / T.cast(N, "float32")
    return (x[i, j] - mean) * T.rsqrt(var + 1e-5) * g[j] + b[j]


@tile_op
def rmsnorm(x: Tensor[M, N], w: Tensor[N]) -> Tensor[M, N]:
    r = T.rsqrt(sum(x[i, k] * x[i, k] for k in range(N)) / T.cast(N, "float32") + 1e-6)
    return x[i, j] * r * w[j]


C = math.sqrt(2.0 / math.pi)


def gelu(v):
    return 0.5 * v * (1.0 + T.tanh(C * (v + 0.044715 * v * v * v)))


@tile_op
def bias_gelu(x: Tensor[M, N], b: Tensor[N]) -> Tensor[M, N]:
    return gelu(x[i, j] + b[j])


@tile_op
def bias_gelu_bf16(x: Tensor[M, N, "bfloat16"], b: Tensor[N, "bfloat16"]) \
        -> Tensor[M, N, "bfloat16"]:
    return gelu(x[i, j] + b[j])


@tile_op
def row_sum(x: Tensor[M, N]) -> Tensor[M]:
    return sum(x[i, k] for k in range(N))


@tile_op
def row_stats(x: Tensor[M, N]) -> (Tensor[M], Tensor[M]):
    return max(x[i, k] for k in range(N)), min(x[i, k] for k in range(N) if x[i, k] > 0)


@tile_op
def causal_relu(x: Tensor[M, N]) -> Tensor[M, N, "float16"]:
    return T.cast(x[i, j] if i >= j else T.if_then_else(x[i, j] > 0, x[i, j], -1.0), "float16")


@tile_op(tiles={"i": 16, "j": 32, "k": 8})
def matmul_bias_relu(a: Tensor[M, K], b: Tensor[K, N], c: Tensor[N]) -> Tensor[M, N]:
    return T.max(sum(a[i, k] * b[k, j] for k in range(K)) + c[j], 0.0)


@tile_op
def scale_rows(x: Tensor[M, N], s: Tensor[M, 1]) -> Tensor[M, N]:
    return x[i, j] * s[i, 0] + T.cast(j, "float32")


@tile_op(index="b i j")
def batched_scores(q: Tensor[M, N, K], kt: Tensor[M, N, K]) -> Tensor[M, N, N]:
    return sum(q[b, i, d] * kt[b, j, d] for d in range(K))


B, H, S, D = T.symbolic("B"), T.symbolic("H"), T.symbolic("S"), T.symbolic("D")


@tile_op(index="b h i d", tiles={"i": 8, "d": 8, "l": 16, "e": 8})
def attention(q: Tensor[B, H, S, D], k: Tensor[B, H, S, D], v: Tensor[B, H, S, D]) \
        -> Tensor[B, H, S, D]:
    m = max(sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) for l in range(S))
    z = sum(T.exp(sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) - m) for l in range(S))
    return sum(T.exp(sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) - m) * v[b, h, l, d]
               for l in range(S)) / z


Nb, Hx, Wx, Cx, Fx, KH, KW = (T.symbolic(s) for s in ("Nb", "H", "W", "C", "F", "KH", "KW"))


@tile_op(index="n p q f")
def conv2d(x: Tensor[Nb, Hx, Wx, Cx], w: Tensor[KH, KW, Cx, Fx]) \
        -> Tensor[Nb, Hx - KH + 1, Wx - KW + 1, Fx]:
    return sum(x[n, p + r, q + s, c] * w[r, s, c, f]
               for r in range(KH) for s in range(KW) for c in range(Cx))


@tile_op
def cross_entropy(x: Tensor[M, N], label: Tensor[M, "int32"]) -> Tensor[M]:
    m = max(x[i, k] for k in range(N))
    return T.log(sum(T.exp(x[i, k] - m) for k in range(N))) + m - x[i, label[i]]


@tile_op
def shifted_diag(x: Tensor[M, M]) -> Tensor[M]:
    return x[i, i] + x[i - 1, i]  # an element outside the tensor reads 0


# softmax and a gemm prologue from parts (graph fusion tests)
@tile_op
def row_max(x: Tensor[M, N]) -> Tensor[M]:
    return max(x[i, k] for k in range(N))


@tile_op
def exp_sub(x: Tensor[M, N], m: Tensor[M]) -> Tensor[M, N]:
    return T.exp(x[i, j] - m[i])


@tile_op
def div_rows(x: Tensor[M, N], s: Tensor[M]) -> Tensor[M, N]:
    return x[i, j] / s[i]


@tile_op
def scale_shift(x: Tensor[M, N], g: Tensor[N], b: Tensor[N]) -> Tensor[M, N]:
    return x[i, j] * g[j] + b[j]


@tile_op
def to_bf16(x: Tensor[M, N]) -> Tensor[M, N, "bfloat16"]:
    return T.cast(x[i, j], "bfloat16")


@tile_op
def add(x: Tensor[M, N], y: Tensor[M, N]) -> Tensor[M, N]:
    return x[i, j] + y[i, j]


S1, E1 = T.symbolic("S1"), T.symbolic("E1")


@tile_op(tiles={"i": 8, "j": 8, "l": 16, "e": 8})
def attention2d(q: Tensor[S1, E1], k: Tensor[S1, E1], v: Tensor[S1, E1]) -> Tensor[S1, E1]:
    m = max(sum(q[i, e] * k[l, e] for e in range(E1)) for l in range(S1))
    z = sum(T.exp(sum(q[i, e] * k[l, e] for e in range(E1)) - m) for l in range(S1))
    return sum(T.exp(sum(q[i, e] * k[l, e] for e in range(E1)) - m) * v[l, j]
               for l in range(S1)) / z


Hd = T.symbolic("Hd")


@tile_op(tiles={"j": 16})
def mlp_block(x: Tensor[M, K], w1: Tensor[K, Hd], b1: Tensor[Hd], w2: Tensor[Hd, N]) \
        -> Tensor[M, N]:
    return sum(gelu(sum(x[i, e] * w1[e, l] for e in range(K)) + b1[l]) * w2[l, j]
               for l in range(Hd))
