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


# ---------------------------------------------------------------- conv family (issue 18)


def conv_nhwc_reference(X, Wt, stride=1, pad=0, dilation=1):
    """(float64 conv of NHWC X with (KH, KW, C, F) filters, the same of |X| and |Wt|)."""
    N, H, W, C = X.shape
    KH, KW, _, F = Wt.shape
    OH = (H + 2 * pad - dilation * (KH - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (KW - 1) - 1) // stride + 1
    Xp = np.pad(_f64(X), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    exact, absum = np.zeros((N, OH, OW, F)), np.zeros((N, OH, OW, F))
    for kh in range(KH):
        for kw in range(KW):
            h0, w0 = kh * dilation, kw * dilation
            win = Xp[:, h0:h0 + stride * (OH - 1) + 1:stride, w0:w0 + stride * (OW - 1) + 1:stride]
            exact += np.einsum("nhwc,cf->nhwf", win, _f64(Wt[kh, kw]))
            absum += np.einsum("nhwc,cf->nhwf", np.abs(win), np.abs(_f64(Wt[kh, kw])))
    return exact, absum


def conv_form_case(rng, N, H, W, C, F, KH=3, KW=3, stride=1, pad=1, dilation=1,
                   form="direct") -> Case:
    """conv_direct.Conv2d in either form. Both are fp32 gemms of depth KH*KW*C (the
    direct form adds its taps' products into one accumulator, im2col runs one gemm): one
    rounding per product and per add, in any order, gamma_{depth+1} sum|x||w|."""
    from tilepy.kernels.conv_direct import Conv2d

    x, w = _rand(rng, (N, H, W, C), "float32"), _rand(rng, (KH, KW, C, F), "float32")
    exact, absum = conv_nhwc_reference(x, w, stride, pad, dilation)
    depth = KH * KW * C
    bound = gamma(depth + 1) * absum + 2 * gamma(depth, 2.0**-53) * absum
    conv = Conv2d(N, H, W, C, F, KH, KW, stride, pad, dilation, form)
    return Case(f"conv2d {form}", "float32", f"{N}x{H}x{W}x{C}*{KH}x{KW}x{F} s{stride} "
                f"d{dilation}", lambda a, b: conv(a, b).copy(), [x, w], exact, bound)


def winograd_roundings(m: int, C: int) -> int:
    """Roundings on any path of Winograd F(m x m, 3 x 3) (winograd.py), per stage: a
    combination of a transform's row with k nonzero coefficients is k products and k - 1
    adds in some order, each product of a value with one coefficient; a term suffers at
    most k roundings, one more for a coefficient that float32 cannot hold (1/6 ...).
    Stages: G twice, B^T twice, the product U V (1), the sum over C channels (C), A^T
    twice. Counting every coefficient as inexact keeps it simple (and safe)."""
    from tilepy.kernels.winograd import MATRICES

    k = {name: max(sum(1 for c in row if c != 0) for row in mat) + 1
         for name, mat in MATRICES[m].items()}
    return 2 * k["G"] + 2 * k["BT"] + 1 + C + 2 * k["AT"]


def winograd_magnitude(X, Wt, m: int, pad: int = 1) -> np.ndarray:
    """sum_c |A^T| ((|G| |g| |G|^T) . (|B^T| |d| |B|)) |A| per output, in float64: the
    Winograd evaluation with every value and coefficient replaced by its magnitude."""
    from tilepy.kernels.winograd import MATRICES, tiles

    mats = {k: np.abs(np.array([[float(c) for c in r] for r in v])) for k, v in
            MATRICES[m].items()}
    G, BT, AT = mats["G"], mats["BT"], mats["AT"]
    N, H, W, C = X.shape
    F, a = Wt.shape[3], m + 2
    OH, OW = H + 2 * pad - 2, W + 2 * pad - 2
    TH, TW = tiles(OH, OW, m)
    Xp = np.zeros((N, TH * m + 2, TW * m + 2, C))
    Xp[:, pad:pad + H, pad:pad + W] = np.abs(_f64(X))
    U = np.einsum("xi,ijcf,yj->xycf", G, np.abs(_f64(Wt)), G)
    d = np.stack([np.stack([Xp[:, i:i + TH * m:m, j:j + TW * m:m] for j in range(a)], 1)
                  for i in range(a)], 1)  # (N, a, a, TH, TW, C)
    V = np.einsum("xi,nijhwc,yj->nxyhwc", BT, d, BT)
    Mm = np.einsum("nxyhwc,xycf->nxyhwf", V, U)
    Y = np.einsum("rx,nxyhwf,sy->nhrwsf", AT, Mm, AT).reshape(N, TH * m, TW * m, F)
    return Y[:, :OH, :OW]


def winograd_case(rng, N, H, W, C, F, m=2, pad=1, scale=1.0) -> Case:
    """winograd.Winograd: each stage's computed values are within gamma_k of that
    stage's magnitudes (winograd_magnitude), and stages compose (gamma_a + gamma_b +
    gamma_a gamma_b <= gamma_(a+b)), so |y - conv| <= gamma_n * magnitude with n from
    winograd_roundings; this holds in any summation order, with or without FMA, so for
    fast mode too. The transforms are exact in exact arithmetic (Lavin and Gray)."""
    from tilepy.kernels.winograd import Winograd

    x, w = _rand(rng, (N, H, W, C), "float32", scale), _rand(rng, (3, 3, C, F), "float32")
    exact, absum = conv_nhwc_reference(x, w, 1, pad)
    mag = winograd_magnitude(x, w, m, pad)
    bound = gamma(winograd_roundings(m, C)) * mag + 2 * gamma(9 * C, 2.0**-53) * absum

    def run(a, b):
        wg = Winograd(N, H, W, C, F, m, pad)
        wg.filters(b)
        return wg(a).copy()

    return Case(f"winograd F({m}x{m},3x3)", "float32", f"{N}x{H}x{W}x{C}*3x3x{F}", run,
                [x, w], exact, bound)


def strassen_constant(K: int, levels: int) -> float:
    """e with max|C - fl(C)| <= e u max|A| max|B| (first order in u) for `levels` levels
    of strassen.py's Strassen-Winograd on inner dimension K. The leaf gemm: gamma_{k+1}
    sum|a||b| <= (k + 1) k u |A||B|. One level with half inner dimension h, counting
    |S1|,|S3| <= 2|A|, |S2| <= 3|A|, |S4| <= 4|A| (errors 2, 5, 2, 9 u|A|, the same for
    T) and |P_i| <= h |S||T|: the products carry e(h) times |S||T| (1, 1, 4, 4, 4, 9, 4)
    plus h times the operands' errors (0, 0, 9, 9, 8, 30, 8); the merge's adds give
    C11: 2e + 2h, C12 and C21: 18e + 89h, C22: 18e + 88h. So e = 18 e(h) + 89 h."""
    if levels == 0:
        return float((K + 1) * K)
    h = -(-K // 2)
    return 18 * strassen_constant(h, levels - 1) + 89 * h


def strassen_case(rng, M, K, N, levels=1) -> Case:
    """strassen.strassen: the normwise first-order bound of strassen_constant, e u |A||B|.
    Entries of C reach K |A||B|, so relative to that scale the bound is (e/K) u; the
    second-order terms (not derived here) are covered the way gamma_n extends n u, as
    K gamma_{e/K} |A||B| with (e/K) u <= 0.1 required. Plus the float64 reference's own
    error. Normwise, so loose for most entries (docs/conv.md measures the real errors)."""
    from tilepy.kernels.strassen import strassen

    a, b = _rand(rng, (M, K), "float32"), _rand(rng, (K, N), "float32")
    A, B = _f64(a), _f64(b)
    e = strassen_constant(K, levels)
    assert e / K * U32 <= 0.1, "strassen_case: sizes too large for the first-order bound"
    big = np.abs(A).max() * np.abs(B).max()
    bound = np.full((M, N), K * gamma(e / K) * big + 2 * gamma(K, 2.0**-53) * K * big)
    return Case(f"strassen {levels} level(s)", "float32", f"{M}x{N}x{K}",
                lambda x, y: strassen(x, y, levels), [a, b], A @ B, bound)


def _nchw_windows(N, C, H, W, KH, KW, stride, pad, dil, OH, OW):
    """Per tap (kh, kw), the padded input's index slices that tap reads for every output."""
    for kh in range(KH):
        for kw in range(KW):
            h0, w0 = kh * dil, kw * dil
            yield kh, kw, (slice(None), slice(None), slice(h0, h0 + stride * (OH - 1) + 1, stride),
                           slice(w0, w0 + stride * (OW - 1) + 1, stride))


def conv_nchw_reference(kind, X, Wt, dY, groups, stride, pad, dil):
    """float64 forward (Y from X), input gradient (dX from dY) or weight gradient (dW from
    dY and X) of the grouped, strided, dilated NCHW convolution conv_nchw.py defines."""
    N, C, H, W = X.shape
    F, Cg, KH, KW = Wt.shape
    OH, OW = dY.shape[2:]
    Fg = F // groups
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dYg = dY.reshape(N, groups, Fg, OH, OW)
    out = {"fwd": np.zeros((N, groups, Fg, OH, OW)), "dgrad": np.zeros(Xp.shape),
           "wgrad": np.zeros((groups, Fg, Cg, KH, KW))}[kind]
    for kh, kw, sl in _nchw_windows(N, C, H, W, KH, KW, stride, pad, dil, OH, OW):
        Wk = Wt[:, :, kh, kw].reshape(groups, Fg, Cg)
        if kind == "fwd":
            out += np.einsum("ngcij,gfc->ngfij", Xp[sl].reshape(N, groups, Cg, OH, OW), Wk)
        elif kind == "dgrad":
            out[sl] += np.einsum("ngfij,gfc->ngcij", dYg, Wk).reshape(N, C, OH, OW)
        else:
            win = Xp[sl].reshape(N, groups, Cg, OH, OW)
            out[..., kh, kw] = np.einsum("ngfij,ngcij->gfc", dYg, win)
    if kind == "dgrad":
        return out[:, :, pad:pad + H, pad:pad + W]
    return out.reshape({"fwd": (N, F, OH, OW), "wgrad": Wt.shape}[kind])


def conv_nchw_case(rng, kind, N, C, H, W, F, KH=3, KW=3, groups=1, stride=1, pad=0,
                   dil=1) -> Case:
    """conv_nchw.conv2d_{fwd,dgrad,wgrad}: each an fp32 gemm (sequential k in exact mode),
    depth Cg*KH*KW (fwd), Fg*KH*KW (dgrad) or N*OH*OW (wgrad); gamma_{depth+1} times the
    same computation on magnitudes; the forward's bias add rounds once more."""
    from tilepy.kernels import conv_nchw

    OH = (H + 2 * pad - dil * (KH - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (KW - 1) - 1) // stride + 1
    x = _rand(rng, (N, C, H, W), "float32")
    w = _rand(rng, (F, C // groups, KH, KW), "float32")
    dy = _rand(rng, (N, F, OH, OW), "float32")
    b = _rand(rng, (F,), "float32")
    ref = conv_nchw_reference(kind, _f64(x), _f64(w), _f64(dy), groups, stride, pad, dil)
    mag = conv_nchw_reference(kind, np.abs(_f64(x)), np.abs(_f64(w)), np.abs(_f64(dy)),
                              groups, stride, pad, dil)
    S = np.array([stride, pad, dil], np.int32)
    depth = {"fwd": C // groups * KH * KW, "dgrad": F // groups * KH * KW,
             "wgrad": N * OH * OW}[kind]
    n = depth + 1
    if kind == "fwd":
        ref, mag, n = ref + _f64(b)[None, :, None, None], mag + np.abs(_f64(b))[None, :, None,
                                                                                   None], n + 1
    kernel = getattr(conv_nchw, f"conv2d_{kind}")()
    shape = {"fwd": (N, F, OH, OW), "dgrad": (N, C, H, W), "wgrad": w.shape}[kind]
    args = {"fwd": [x, w, b, S], "dgrad": [dy, w, S], "wgrad": [dy, x, S]}[kind]

    def run(*arrays):
        out = np.empty(shape, np.float32)
        kernel(*arrays, out)
        return out

    bound = gamma(n) * mag + 2 * gamma(depth, 2.0**-53) * mag
    return Case(f"conv2d nchw {kind}", "float32", f"{N}x{C}x{H}x{W}*{F} g{groups} s{stride} "
                f"p{pad} d{dil}", run, args, ref, bound)
