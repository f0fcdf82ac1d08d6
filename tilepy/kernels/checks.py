"""Each reference kernel next to an independent numpy formulation and a derived error bound.

A `Case` holds a kernel, its inputs, the float64 reference computed by plain numpy (never
by tilepy) and a bound on |kernel - reference| per element, derived from the kernel's
numerics (comments derive each; u is the unit roundoff of the dtype a step rounds to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from tilepy.ir.ops import OPS, Op
from tilepy.kernels import (
    bias_gelu,
    conv2d_nhwc,
    dequant_gemm_fp4,
    flash_attention,
    gemm,
    layernorm,
    rmsnorm,
    row_reduce,
    softmax,
    vector_add,
)

U32 = 2.0 ** -24


def fast_charge(op: Op) -> float:
    """The relative error of one float32 `op` in units of U32, as the bounds below charge
    it: its fast form's error in ulps (the op table's fast_ulps, which tests/jit holds the
    JIT's fast functions to), an ulp being at most 2 U32 relative. Without a fast form,
    fast mode rounds the float64 result once, as the exact path does: half an ulp."""
    ulps = OPS[op].fast_ulps
    return 2 * (0.5 if ulps is None else ulps)


EXP_U, EXP2_U = fast_charge(Op.EXP), fast_charge(Op.EXP2)


def unit_roundoff(dtype) -> float:
    """Half an ulp of 1.0 relative: 2^-(mantissa bits + 1)."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2


def gamma(n: int, u: float = U32) -> float:
    """The classic n*u / (1 - n*u) bound for n successive roundings."""
    return n * u / (1 - n * u)


@dataclass
class Case:
    name: str
    dtype: str
    shape: str
    kernel: object
    inputs: list
    reference: np.ndarray
    bound: np.ndarray

    def error(self, out: np.ndarray) -> tuple[float, float]:
        """(max |out - reference|, max of that error over the bound)."""
        err = np.abs(out.astype(np.float64) - self.reference)
        worst = float(np.nanmax(err)) if err.size else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(err == 0, 0.0, err / self.bound)
        return worst, float(np.nanmax(ratio)) if ratio.size else 0.0

    def passes(self, out: np.ndarray) -> bool:
        err = np.abs(out.astype(np.float64) - self.reference)
        return bool(np.all(err <= self.bound)) and not np.isnan(out.astype(np.float64)).any()


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.dtype(dtype))


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


# ---------------------------------------------------------------- gemm family


def gemm_case(rng, M, N, K, in_dtype="float16", trans_A=False, trans_B=False,
              out_dtype="float32", blocks=(64, 64, 32)) -> Case:
    a = _rand(rng, (K, M) if trans_A else (M, K), in_dtype)
    b = _rand(rng, (N, K) if trans_B else (K, N), in_dtype)
    A, B = _f64(a), _f64(b)
    A, B = (A.T if trans_A else A), (B.T if trans_B else B)
    exact = A @ B
    s = np.abs(A) @ np.abs(B)
    # Products of inputs narrower than fp32 are exact in fp32; fp32 inputs round each
    # product once (one more rounding). K sequential fp32 adds: gamma_K * sum|a||b|. The
    # store to out_dtype rounds once more, relative u_out. The float64 reference itself is
    # off by at most gamma_K(2^-53) * sum|a||b|, covered by doubling that term.
    n = K + (1 if np.dtype(in_dtype) == np.float32 else 0)
    u_out = unit_roundoff(out_dtype)
    bound = gamma(n) * s + u_out * (np.abs(exact) + gamma(n) * s) + 2 * gamma(K, 2.0**-53) * s
    bm, bn, bk = blocks
    k = gemm(bm, bn, bk, in_dtype, out_dtype, "float32", trans_A, trans_B)
    flags = ("T" if trans_A else "N") + ("T" if trans_B else "N")
    return Case(f"gemm {flags}", f"{in_dtype}->{out_dtype}", f"{M}x{N}x{K}", k, [a, b],
                exact, bound)


def dequant_case(rng, M, N, K) -> Case:
    a = _rand(rng, (M, K), "bfloat16")
    codes = rng.integers(0, 16, size=(N, K), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # low nibble first
    b = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)  # ml_dtypes decodes fp4
    exact = _f64(a) @ b.T
    s = np.abs(_f64(a)) @ np.abs(b.T)
    # bf16 x fp4 products are exact in fp32; K sequential fp32 adds; fp32 output.
    bound = gamma(K) * s + 2 * gamma(K, 2.0**-53) * s
    return Case("dequant gemm", "bf16 x fp4->float32", f"{M}x{N}x{K}",
                dequant_gemm_fp4(64, 64, 64), [a, packed], exact, bound)


def conv_case(rng, N, H, W, C, F, KH=3, KW=3, stride=1, pad=1) -> Case:
    x = _rand(rng, (N, H, W, C), "float32")
    w = _rand(rng, (KH, KW, C, F), "float32")
    X, Wt = _f64(x), _f64(w)
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    Xp = np.pad(X, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    exact = np.zeros((N, OH, OW, F))
    absum = np.zeros((N, OH, OW, F))
    for kh in range(KH):
        for kw in range(KW):
            win = Xp[:, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride, :]
            exact += np.einsum("nhwc,cf->nhwf", win, Wt[kh, kw])
            absum += np.einsum("nhwc,cf->nhwf", np.abs(win), np.abs(Wt[kh, kw]))
    depth = KH * KW * C
    # an fp32 gemm with K = KH*KW*C: one rounding per product and per add
    bound = gamma(depth + 1) * absum + 2 * gamma(depth, 2.0**-53) * absum
    k = conv2d_nhwc(N, H, W, C, F, KH, KW, stride, pad)
    return Case("conv2d nhwc", "float32", f"{N}x{H}x{W}x{C}*{KH}x{KW}x{F}", k, [x, w],
                exact, bound)


# ---------------------------------------------------------------- row kernels


def softmax_case(rng, M, N, block_N=256) -> Case:
    x = _rand(rng, (M, N), "float32", 3.0)
    X = _f64(x)
    m = X.max(axis=1, keepdims=True)
    e = np.exp(X - m)
    ref = e / e.sum(axis=1, keepdims=True)
    chunks = math.ceil(N / block_N)
    spread = float((m - X).max())
    # x - m rounds (abs u*|x - m|, relative u*|x - m| after exp); exp adds EXP_U; N
    # sequential adds (gamma_N); each of `chunks` rescales multiplies by an exp(prev - new)
    # (EXP_U + u plus u*spread); the final divide rounds (u).
    rel = (N + chunks * (EXP_U + 1 + 2 * spread) + EXP_U + 2 + 2 * spread) * U32 * 1.01
    name = "softmax (one pass)" if N <= block_N else "softmax (online)"
    return Case(name, "float32", f"{M}x{N}", softmax(1, block_N),
                [x], ref, rel * ref + 1e-45)


def layernorm_case(rng, M, N) -> Case:
    x = _rand(rng, (M, N), "float32")
    g, b = _rand(rng, (N,), "float32"), _rand(rng, (N,), "float32")
    X, G, B = _f64(x), _f64(g), _f64(b)
    mu = X.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((X - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    ref = (X - mu) * rstd * G + B
    # Every value on the path x -> (x - mu) -> * rstd -> * g -> + b passes through at most
    # N + 8 roundings (the N-term sums dominate), each relative u to the magnitudes listed;
    # the mean's error enters scaled by rstd*|g|, and rsqrt halves the variance's relative
    # error; a factor 2 covers the products of these first-order terms.
    mag = np.abs(X - mu) * rstd * np.abs(G) + np.abs(mu) * rstd * np.abs(G) + np.abs(B)
    return Case("layernorm", "float32", f"{M}x{N}", layernorm(4, 256), [x, g, b], ref,
                2 * (N + 8) * U32 * mag)


def rmsnorm_case(rng, M, N) -> Case:
    x = _rand(rng, (M, N), "float32")
    w = _rand(rng, (N,), "float32")
    X, Wt = _f64(x), _f64(w)
    ref = X / np.sqrt((X * X).mean(axis=1, keepdims=True) + 1e-6) * Wt
    # squares (u), N adds (gamma_N), divide + add + rsqrt (3u, halved by the root), two
    # multiplies (2u): relative (N + 6)u, doubled for second-order terms.
    return Case("rmsnorm", "float32", f"{M}x{N}", rmsnorm(4, 256), [x, w], ref,
                2 * (N + 6) * U32 * np.abs(ref) + 1e-45)


def row_reduce_case(rng, M, N, kind) -> Case:
    x = _rand(rng, (M, N), "float32")
    X = _f64(x)
    ref = {"sum": X.sum(1), "max": X.max(1), "min": X.min(1), "abssum": np.abs(X).sum(1),
           "absmax": np.abs(X).max(1)}[kind]
    # max/min/absmax are exact; sums are N sequential fp32 adds: gamma_N * sum|x|
    bound = gamma(N) * np.abs(X).sum(1) if "sum" in kind else np.zeros(M)
    return Case(f"row {kind}", "float32", f"{M}x{N}", row_reduce(kind), [x], ref,
                bound)


def vector_add_case(rng, n) -> Case:
    x, y = _rand(rng, (n,), "float32"), _rand(rng, (n,), "float32")
    # one IEEE float32 add: within u of the exact sum
    exact = _f64(x) + _f64(y)
    return Case("vector add", "float32", f"{n}", vector_add(1024), [x, y],
                exact, U32 * np.abs(exact))


def bias_gelu_case(rng, M, N) -> Case:
    x, b = _rand(rng, (M, N), "bfloat16"), _rand(rng, (N,), "bfloat16")
    v = _f64(x) + _f64(b)[None, :]
    z = math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)
    ref = 0.5 * v * (1 + np.tanh(z))
    # fp32 chain: v and z carry at most 8 roundings (|dz| <= 8u|z| + 8u|v|^3 terms), the
    # output moves by at most 0.5|v| per unit of z, and the bf16 store rounds once (u_bf16).
    u16 = unit_roundoff("bfloat16")
    bound = u16 * np.abs(ref) * 1.01 + 8 * U32 * (np.abs(v) + np.abs(v) * (np.abs(z) + 1))
    return Case("bias + gelu", "bfloat16", f"{M}x{N}", bias_gelu(32, 128),
                [x, b], ref, bound)


def attention_case(rng, B, H, S, D, causal) -> Case:
    q, k, v = (_rand(rng, (B, H, S, D), "float32") for _ in range(3))
    Q, K_, V = _f64(q), _f64(k), _f64(v)
    s = Q @ np.swapaxes(K_, -1, -2) / math.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = p @ V
    nblocks = math.ceil(S / 64)
    spread = float(np.nanmax(np.where(np.isinf(s), 0, s.max(-1, keepdims=True) - s)))
    qk = float((np.abs(Q) @ np.swapaxes(np.abs(K_), -1, -2)).max()) / math.sqrt(D)
    # scores: D fp32 adds (gamma_D * |q||k|), scaled and passed through exp2 (relative
    # error ~ the absolute error of the exponent: spread + qk terms, plus EXP2_U); row sums
    # and P.V: S adds each; 2 roundings and an exp2 per rescale per block; final divide.
    # All relative to sum p|v|.
    c = (S + D + (4 + EXP2_U) * nblocks + 8 + EXP2_U + 2 * (spread + D * qk)) * U32 * 1.01
    return Case("flash attention" + (" causal" if causal else ""), "float32",
                f"{B}x{H}x{S}x{D}", flash_attention(B, H, S, D, causal),
                [q, k, v], ref, c * (p @ np.abs(V)))


CASES: dict[str, Callable] = {
    "gemm": gemm_case, "dequant": dequant_case, "conv": conv_case, "softmax": softmax_case,
    "layernorm": layernorm_case, "rmsnorm": rmsnorm_case, "row_reduce": row_reduce_case,
    "vector_add": vector_add_case, "bias_gelu": bias_gelu_case, "attention": attention_case,
}


def demo_cases(seed: int = 0) -> list[Case]:
    """The cases `make demo` runs: every reference kernel, sizes with ragged edges."""
    rng = np.random.default_rng(seed)
    return [
        gemm_case(rng, 200, 136, 96, "float32"),
        gemm_case(rng, 128, 128, 128, "float16", trans_B=True, out_dtype="float16"),
        gemm_case(rng, 96, 160, 64, "bfloat16", trans_A=True),
        gemm_case(rng, 128, 64, 128, "float8_e4m3fn"),
        dequant_case(rng, 64, 128, 128),
        conv_case(rng, 2, 14, 14, 16, 32),
        softmax_case(rng, 64, 1000),
        layernorm_case(rng, 64, 1000),
        rmsnorm_case(rng, 64, 1000),
        row_reduce_case(rng, 64, 1000, "sum"),
        row_reduce_case(rng, 64, 1000, "absmax"),
        vector_add_case(rng, 100_000),
        bias_gelu_case(rng, 100, 300),
        attention_case(rng, 1, 2, 200, 32, False),
        attention_case(rng, 1, 2, 200, 32, True),
    ]
