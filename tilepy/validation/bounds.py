"""Sound elementwise error bounds: |backend output - exact result| <= bound for EVERY output a
backend following the config's numerics may return, in any summation order.

Each function derives its bound from rounding-error analysis (the comments derive them);
u is `Numerics.u(dtype)`, the error one rounding may make (a whole ulp by default, so
truncating hardware is covered). Never tuned on data: a bound that flags a correct output
is a bug here. The float64 reference's own error is added where it is not exact.
"""

from __future__ import annotations

import numpy as np

from tilepy.precision.formats import get_format
from tilepy.validation.models import Numerics, gamma, tiny, unit_roundoff

U64 = 2.0 ** -53
SLACK = 1 + 2.0 ** -30   # covers the float64 arithmetic that evaluates the bounds


def _mant(dtype) -> int:
    return get_format(dtype).man_bits


LAMBDA = 6.0  # the probabilistic bound fails with probability <= 2 exp(-LAMBDA^2 / 2) = 3e-8


def prob_gamma(n: float, u: float) -> float:
    """Higham and Mary's probabilistic gamma: with independent, mean-zero rounding errors
    of unit u, n roundings err by at most exp(LAMBDA sqrt(n) u + n u^2 / (1 - u)) - 1,
    except with probability 2 exp(-LAMBDA^2 (1 - u)^2 / 2)."""
    return float(np.expm1(LAMBDA * np.sqrt(n) * u + n * u * u / (1 - u)))


def prob_coefficient(num: Numerics, in_dtypes: list[str], k: int):
    """The dot-product coefficient with sqrt(k) growth (prob_gamma at half-ulp roundings):
    None for the truncating fp8 accumulators, whose errors are biased."""
    if num.accumulate in ("fast", "promote"):
        return None
    return dot_coefficient(num, in_dtypes, k,
                           lambda n, u: prob_gamma(n, u / num.per_rounding))


def dot_coefficient(num: Numerics, in_dtypes: list[str], k: int, g=gamma) -> float:
    """c with |computed dot - exact dot| <= c * sum_k |a_k||b_k| for k-term dot products of
    stored inputs under the accumulation model (scales and output rounding excluded); g is
    the growth of n roundings (gamma: worst case)."""
    acc = num.accumulate
    u32 = num.u("float32")
    rel_in = 0.0
    if acc == "tf32":  # each input rounded to 10 mantissa bits: (1+u)^2 - 1 per product
        ut = num.per_rounding * 2.0 ** -11
        rel_in = (1 + ut) ** 2 - 1
    elif get_format(num.compute).bits < min(get_format(d).bits for d in in_dtypes):
        uc = num.u(num.compute)  # inputs rounded to a narrower compute dtype first
        rel_in = (1 + uc) ** 2 - 1
    if acc == "exact":
        return rel_in
    bits = [min(_mant(d), 10 if acc == "tf32" else 52) + 1 for d in in_dtypes]
    if acc in ("fast", "promote"):
        # truncation to m bits errs < 2^-m relative; one bit more covers the alignment of
        # a k-block's products before they reach the accumulator
        ut = 2.0 ** -(num.mantissa_bits - 1)
        if acc == "fast":
            return rel_in + (1 + rel_in) * gamma(k + 1, ut)
        every = min(num.promote_every, k)
        runs = -(-k // every)
        inner = gamma(every + 1, ut)
        return rel_in + (1 + rel_in) * (inner + (1 + inner) * gamma(runs + 1, u32))
    u_acc = {"fp32": u32, "tf32": u32, "fp16": num.u("float16"),
             "bf16": num.u("bfloat16")}[acc]
    acc_bits = {"fp32": 24, "tf32": 24, "fp16": 11, "bf16": 8}[acc]
    # k - 1 additions in any order (a tree of height <= k - 1), plus one rounding of each
    # product unless the product of the two significands fits the accumulator.
    n = k - 1 + (0 if sum(bits) <= acc_bits else 1) + 1  # +1: conversion out of the unit
    return rel_in + (1 + rel_in) * g(n, u_acc)


def finish(num: Numerics, delta: np.ndarray, exact: np.ndarray, after: int,
           ref_error=0.0) -> np.ndarray:
    """The bound after `after` further compute-dtype roundings (scales, bias, divides) of a
    value within `delta` of `exact`, then the rounding to the output dtype."""
    uc = num.u(num.compute)
    mag = np.abs(exact)
    d = delta + gamma(after, uc) * (mag + delta) if after else delta
    out = d + num.u(num.output) * (mag + d) + num.per_rounding * tiny(num.output)
    return (out + ref_error) * SLACK


def gemm_bound(num, in_dtypes, k, s, exact, after=0, ref_error=0.0, coef=None) -> np.ndarray:
    """gemm (and conv as a gemm of depth k): s = sum |a||b| per output element."""
    delta = (dot_coefficient(num, in_dtypes, k) if coef is None else coef) * s
    return finish(num, delta, exact, after, ref_error)


def gemm_linear(num, in_dtypes, k, after=0, ref_rel=0.0) -> tuple[float, float, float]:
    """(alpha, beta, c) with gemm_bound <= alpha s + beta |exact| + c: `finish` is linear in
    s and |exact|, so large outputs take three passes (the float32 path adds slack)."""
    c = dot_coefficient(num, in_dtypes, k)
    ga = gamma(after, num.u(num.compute)) if after else 0.0
    uo = num.u(num.output)
    alpha = ((1 + ga) * (1 + uo) * c + ref_rel) * SLACK
    beta = (ga * (1 + uo) + uo) * SLACK
    return alpha, beta, num.per_rounding * tiny(num.output) * SLACK


def reference_error(k: int, s: np.ndarray) -> np.ndarray:
    """The error of a float64 BLAS dot product of k terms (the reference): gamma_k(2^-53) s."""
    return gamma(k, U64) * s


# ---------------------------------------------------------------- row softmax family


def _exp_terms(num: Numerics, n: int) -> tuple[float, float, int]:
    """(c_exp, c_arg, rescales): an exp costs c_exp relative (2 ulps of the compute dtype:
    CUDA expf, exp2 approximations), plus c_arg * |argument| from the roundings of its
    argument (x - max, and x * log2(e) for exp2 forms); an online form rescales its
    running sums at most once per chunk of 16."""
    uc = num.u(num.compute)
    return 4 * unit_roundoff(num.compute) * num.per_rounding, 2 * uc, -(-n // 16)


def softmax_bound(num: Numerics, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Softmax along the last axis of x (float64 of the stored input), p the exact output.
    Numerator e_j: relative rel_j = c_exp + c_arg |x_j - m|, plus rescales (R c_exp +
    c_arg spread); the row sum: the numerators' weighted error + gamma_n; the divide: 2u."""
    n = x.shape[-1]
    uc = num.u(num.compute)
    c_exp, c_arg, r = _exp_terms(num, n)
    m = np.max(x, axis=-1, keepdims=True)
    gap = np.where(np.isfinite(x), m - x, 0.0)
    spread = np.max(gap, axis=-1, keepdims=True)
    resc = r * c_exp + c_arg * spread
    rel_num = c_exp + c_arg * gap + resc
    rel_sum = c_exp + c_arg * np.sum(p * gap, axis=-1, keepdims=True) + resc + gamma(n, uc)
    rel = (rel_num + rel_sum + 2 * uc) * 1.01 / (1 - np.minimum(rel_sum, 0.5))
    floor = 2 * n * _min_normal(num.compute)  # exps flushed to zero
    return finish(num, rel * p + floor, p, 0)


def _min_normal(dtype) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(np.dtype(get_format(dtype).np_dtype)).tiny)


def _rsqrt_rel(num: Numerics, delta, var_eps) -> np.ndarray:
    """Relative error of rsqrt(var + eps) when var carries an absolute error delta: the
    exact interval 1/sqrt(1 - e) - 1, e the relative error of var + eps, then 2 ulps for
    rsqrt itself."""
    uc = num.u(num.compute)
    e = np.minimum((delta + uc * var_eps) / var_eps, 0.999)
    rel = 1 / np.sqrt(1 - e) - 1
    rel = np.where(e >= 0.999, np.inf, rel)
    return rel + 4 * unit_roundoff(num.compute) * num.per_rounding * (1 + rel)


def layernorm_bound(num: Numerics, x, g, b, eps, exact) -> np.ndarray:
    """y = (x - mu) rstd g + b over the last axis, by any algorithm (two-pass, Welford,
    one-pass E[x^2] - mu^2): mu within gamma_{n+1} mean|x|; var within 3 gamma_{n+4}
    mean(x^2) + 2|mu| dmu + dmu^2 (variance="two_pass": the sum of (x - mu_hat)^2 =
    n (var + dmu^2), within gamma_{n+3} of it, plus dmu^2); then the centred value, two
    multiplies, an optional rounding of the normalised value to the output dtype, the
    bias add."""
    n = x.shape[-1]
    uc = num.u(num.compute)
    mu = x.mean(-1, keepdims=True)
    ms = (x * x).mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    dmu = gamma(n + 1, uc) * np.abs(x).mean(-1, keepdims=True)
    if num.options.get("variance") == "two_pass":  # sum (x - mu_hat)^2: no cancellation
        dvar = gamma(n + 3, uc) * (var + dmu * dmu) + dmu * dmu
    else:
        dvar = 3 * gamma(n + 4, uc) * ms + 2 * np.abs(mu) * dmu + dmu * dmu
    rel_r = _rsqrt_rel(num, dvar, var + eps)
    rstd = 1 / np.sqrt(var + eps)
    d = np.abs(x - mu)
    ag = np.ones_like(d) if g is None else np.abs(g)
    dc = dmu + uc * (d + dmu)               # the centred value x - mu_hat
    t = d * rstd * ag                        # |normalised * g|
    et = (dc * (1 + rel_r) + d * rel_r) * rstd * ag
    u_mid = num.u(num.output) if get_format(num.output).bits < 32 else 0.0
    e = et * (1 + 2 * uc) * (1 + u_mid) + (2 * uc + u_mid) * t
    if b is not None:
        e = e + uc * (np.abs(exact) + e)
    return finish(num, e * 1.001, exact, 0)


def rmsnorm_bound(num: Numerics, x, w, eps, exact) -> np.ndarray:
    """y = x rsqrt(mean(x^2) + eps) w: mean(x^2) within gamma_{n+2}; two multiplies and
    an optional rounding of x * rstd to the output dtype before the weight."""
    n = x.shape[-1]
    uc = num.u(num.compute)
    ms = (x * x).mean(-1, keepdims=True)
    rel_r = _rsqrt_rel(num, gamma(n + 2, uc) * ms, ms + eps)
    u_mid = num.u(num.output) if get_format(num.output).bits < 32 else 0.0
    rel = (1 + rel_r) * (1 + uc) ** 2 * (1 + u_mid) - 1
    return finish(num, np.abs(exact) * rel * 1.001, exact, 0)


def attention_bound(num: Numerics, s, s_err, pv_abs, exact, sk_valid, v_dtype) -> np.ndarray:
    """O = softmax(s) V per query row. s_err bounds each score's absolute error (its dot
    product, the scale and log2(e) multiplies); a shift of every score by at most E moves
    each p by a factor within exp(2E) and the row sum likewise; exps, rescales and the
    probabilities' intermediate rounding as in softmax; P V: gamma_{n+1} sum p|v|; the
    final divide 2u. pv_abs = sum_j p_j |v_j|."""
    uc = num.u(num.compute)
    c_exp, c_arg, r = _exp_terms(num, s.shape[-1])
    u_p = num.u(num.intermediate["probs"]) if "probs" in num.intermediate else 0.0
    big = np.max(np.where(np.isfinite(s), s_err, 0.0), -1, keepdims=True)
    m = np.max(s, -1, keepdims=True)
    spread = np.max(np.where(np.isfinite(s), m - s, 0.0), -1, keepdims=True)
    shift = np.expm1(np.minimum(4 * big, 700.0))
    rel_p = shift + 2 * ((r + 1) * c_exp + c_arg * spread) + u_p + gamma(sk_valid, uc)
    acc = dot_coefficient(num, [num.intermediate.get("probs", "float32"), v_dtype], sk_valid)
    rel = (rel_p * (1 + acc) + acc + 2 * uc) * 1.01 / (1 - np.minimum(rel_p, 0.5))
    floor = 2 * sk_valid * _min_normal(num.compute)
    return finish(num, rel * pv_abs + floor, exact, 0)


def cross_entropy_bound(num: Numerics, x, p, target_logit, loss) -> np.ndarray:
    """loss_i = logsumexp(x_i) - x_i[t]: the row sum of exps within rho (as softmax), its
    log within -log(1 - rho) plus 2 ulps of the log, two adds."""
    n = x.shape[-1]
    uc = num.u(num.compute)
    c_exp, c_arg, r = _exp_terms(num, n)
    m = np.max(x, -1)
    gap = np.where(np.isfinite(x), m[:, None] - x, 0.0)
    rho = c_exp + c_arg * np.sum(p * gap, -1) + r * c_exp + c_arg * gap.max(-1) \
        + gamma(n, uc)
    rho = np.minimum(rho, 0.5)
    lse_tail = np.log(np.sum(np.exp(x - m[:, None]), -1))
    e = -np.log1p(-rho) + 2 * c_exp * np.abs(lse_tail) \
        + 2 * uc * (np.abs(m) + np.abs(lse_tail) + np.abs(target_logit) + np.abs(loss))
    return e * 1.01 + 4 * n * _min_normal(num.compute)
