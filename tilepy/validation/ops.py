"""The ops `validate` knows by name: for each, its input roles, its exact float64 result,
its sound bound (bounds.py) and its candidate accumulation models for the statistical tier.

Owns the registry (`OPS`, `register`) and the matrix-product ops: gemm, scaled_gemm, conv2d.
Row-wise ops (softmax, norms, cross-entropy, attention) are in rowops.py. A candidate is a
function (rows, cols) -> (ideal, impl): the model's result without order noise, and one
concrete implementation of it (their spread is the model's own noise), on a sub-grid of the
output's 2-D view, both before the rounding to the output dtype (stats.py rounds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tilepy.precision.formats import get_format
from tilepy.validation import bounds
from tilepy.validation.models import Numerics, gamma, round_mantissa

Candidate = Callable[[np.ndarray, np.ndarray], tuple]


@dataclass
class Prepared:
    exact: np.ndarray            # float64, the output's shape
    bound: np.ndarray            # sound bound, same shape
    view: tuple                  # the output's 2-D view (rows, cols)
    candidates: dict = field(default_factory=dict)   # name -> Candidate
    chosen: str = ""             # the candidate the config describes
    notes: list = field(default_factory=list)
    refine: object = None        # (output, bound) -> bound: tightened where it decides
    prob_bound: object = None    # the probabilistic sqrt(K) bound (dot-product ops)


@dataclass(frozen=True)
class OpSpec:
    name: str
    roles: tuple
    optional: tuple
    prepare: Callable
    defaults: Callable           # (inputs) -> config defaults


OPS: dict = {}


def register(name, roles, optional=(), defaults=None):
    def deco(fn):
        OPS[name] = OpSpec(name, tuple(roles), tuple(optional), fn,
                           defaults or (lambda inputs: {}))
        return fn
    return deco


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def dtype_of(x) -> str:
    return get_format(np.asarray(x).dtype).name


def grid(fn) -> Candidate:
    """A candidate from a function computing the whole 2-D view (cheap ops); computed once."""
    cache = {}

    def cand(rows, cols):
        if "v" not in cache:
            cache["v"] = fn()
        ideal, impl = cache["v"]
        return ideal[np.ix_(rows, cols)], impl[np.ix_(rows, cols)]
    return cand


# ---------------------------------------------------------------- gemm


def _gemm_operands(inp, num):
    a, b = np.asarray(inp["a"]), np.asarray(inp["b"])
    if num.options.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if num.options.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    return a, b


def mm(x, y) -> np.ndarray:
    """A small matrix product without BLAS (whose idle threads cost more than the product
    on a sub-grid), in the operands' dtype: float32 sums in float32."""
    return np.einsum("ik,kj->ij", x, y)


def _tf32(mode):
    return lambda x: round_mantissa(x, 10, mode)


def _prob(num, dts, k, s, exact, after, ref_err):
    c = bounds.prob_coefficient(num, dts, k)
    return None if c is None else bounds.gemm_bound(num, dts, k, s, exact, after, ref_err, c)


def _refiner(a32, b32, exact, alpha, beta, const, slack, low, k):
    """(|output - exact|, bound) -> the bound with the exact sum |a||b| (float64) for the
    elements whose verdict lies between the lower and the Cauchy-Schwarz bound."""
    def refine(abs_err, upper):
        lower = np.abs(exact)
        lower *= np.float32(low[0])
        lower += np.float32(low[1])
        with np.errstate(invalid="ignore"):
            todo = np.nonzero((abs_err > lower) & (abs_err <= upper))
        if not todo[0].size:
            return upper
        fixed = upper.copy()
        i, j = todo
        s = np.einsum("nk,kn->n", np.abs(a32[i]).astype(np.float64),
                      np.abs(b32[:, j]).astype(np.float64)) * (1 + gamma(k, bounds.U64))
        fixed[i, j] = (alpha * s + beta * np.abs(exact[i, j]) + const) * slack
        return fixed
    return refine


def _gemm_float32(a, b, bias, num, dts, k):
    """Large gemms, in one sgemm and a few passes: the reference by float32 BLAS (a float32
    dot product of k terms errs by <= g = gamma_k(2^-24) times S = sum |a||b|). S is bounded
    above by Cauchy-Schwarz (|a_i| |b_j|) and below by |exact| / (1 + g); `refine` computes
    S exactly (float64) only for elements whose verdict lies between the two, so the sound
    verdict is the one the exact S gives. float32 evaluation is charged 2^-20 relative."""
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    exact = a32 @ b32
    g = gamma(k, 2.0 ** -24)
    alpha, beta, const = bounds.gemm_linear(num, dts, k, int(bias is not None), g)
    if bias is not None:
        exact += bias.astype(np.float32)
        beta += 2.0 ** -22  # the float32 add of the bias to the reference
    alpha += beta * g  # beta charges |exact|, which the float32 reference may miss by g S
    slack = 1 + 2.0 ** -20  # covers the float32 roundings of the factors and products
    na = np.sqrt(np.einsum("ik,ik->i", a32, a32, dtype=np.float64)) * (1 + 2 * g)
    nb = np.sqrt(np.einsum("kj,kj->j", b32, b32, dtype=np.float64)) * (1 + 2 * g)
    bound = np.multiply.outer((na * (alpha * slack)).astype(np.float32),
                              (nb * slack).astype(np.float32))
    tmp = np.abs(exact)
    tmp *= np.float32(beta * slack)
    bound += tmp
    bound += np.float32(const * slack)
    del tmp
    low = (alpha / (1 + g) + beta, const)  # the bound with S replaced by |exact| / (1 + g)
    refine = _refiner(a32, b32, exact, alpha / (1 - g), beta, const, slack, low, k)
    return exact, bound, refine


@register("gemm", ["a", "b"], ["bias"])
def gemm(inp, num: Numerics) -> Prepared:
    a, b = _gemm_operands(inp, num)
    k = a.shape[-1]
    dts = [dtype_of(a), dtype_of(b)]
    bias = f64(inp["bias"]) if inp.get("bias") is not None else None
    ref = num.options.get("reference", "auto")
    large = ref == "float32" or (a.size * b.shape[-1] > 2 ** 31 and ref != "float64")
    notes = []
    if large:
        exact, bound, refine = _gemm_float32(a, b, bias, num, dts, k)
        notes.append("reference: float32 BLAS (its error, <= gamma_K u32 sum|a||b|, is in "
                     "the bound); sum|a||b| bounded by Cauchy-Schwarz except where the "
                     "verdict depends on it; models compared on exact float64 rows")
    else:
        A, B = f64(a), f64(b)
        exact = A @ B
        s = (np.abs(A) @ np.abs(B)) * (1 + gamma(k, bounds.U64))
        ref_err = bounds.reference_error(k, s)
        if bias is not None:
            exact = exact + bias
        bound = bounds.gemm_bound(num, dts, k, s, exact, int(bias is not None), ref_err)
        prob = _prob(num, dts, k, s, exact, int(bias is not None), ref_err)
    view = (exact.size // exact.shape[-1], exact.shape[-1])
    cands = _gemm_candidates(a, b, bias, num, dts, view) if k and exact.size else {}
    chosen = {"tf32": "tf32"}.get(num.accumulate, num.accumulate)
    prep = Prepared(exact, bound, view, cands, chosen if chosen in cands else "", notes)
    prep.refine = refine if large else None
    prep.prob_bound = None if large else prob
    return prep


def _gemm_candidates(a, b, bias, num, dts, view) -> dict:
    """Rows of the 2-D view are (batch, m) pairs of a (..., M, K); b is (K, N) or batched
    like a."""
    k, m = a.shape[-1], a.shape[-2] if a.ndim > 1 else 1
    a2 = a.reshape(-1, k)
    b3 = b.reshape(-1, k, b.shape[-1])

    def pick(rows, cols):
        sb = b3[0][:, cols] if b3.shape[0] == 1 else b3[rows // m][:, :, cols]
        return a2[rows], sb

    def prod(x, y):
        return mm(x, y) if y.ndim == 2 else np.einsum("rk,rkc->rc", x, y)

    def model(pre, mode_name):
        def cand(rows, cols):
            sa, sb = pick(rows, cols)
            if pre is None:
                ideal = prod(f64(sa), f64(sb))
                impl = prod(sa.astype(np.float32), sb.astype(np.float32))
            else:
                pa, pb = pre(sa.astype(np.float32)), pre(sb.astype(np.float32))
                ideal = prod(pa, pb)
                impl = prod(pa.astype(np.float32), pb.astype(np.float32))
            impl = impl.astype(np.float64)
            if bias is not None:
                ideal, impl = ideal + bias[cols], impl + bias[cols]
            return ideal, impl
        return cand
    cands = {"fp32": model(None, "fp32")}
    if max(get_format(d).man_bits for d in dts) > 10:
        cands["tf32"] = model(_tf32("nearest"), "tf32")
        cands["tf32 (truncated inputs)"] = model(_tf32("truncate"), "tf32")
    return cands


# ---------------------------------------------------------------- scaled gemm (fp8)


def _scale(x, shape_like_rows: bool):
    s = f64(x)
    if s.ndim == 0 or s.size == 1:
        return s.reshape(()) if s.ndim == 0 else s.reshape(-1)[0] * np.ones(())
    return s.reshape(-1, 1) if shape_like_rows else s.reshape(1, -1)


@register("scaled_gemm", ["a", "b"], ["scale_a", "scale_b", "bias"])
def scaled_gemm(inp, num: Numerics) -> Prepared:
    a, b = _gemm_operands(inp, num)
    k = a.shape[-1]
    sa = _scale(inp.get("scale_a", 1.0), True)
    sb = _scale(inp.get("scale_b", 1.0), False)
    A, B = f64(a), f64(b)
    exact = (A @ B) * sa * sb          # fp8 x fp8 products: exact in float64 for K <= 2^17
    s = (np.abs(A) @ np.abs(B)) * np.abs(sa * sb)
    bias = f64(inp["bias"]) if inp.get("bias") is not None else None
    if bias is not None:
        exact = exact + bias
    ref_err = 0.0 if k <= 2 ** 17 else bounds.reference_error(k, s)
    after = 2 + int(bias is not None)  # the two scale multiplies, the bias add
    bound = bounds.gemm_bound(num, [dtype_of(a), dtype_of(b)], k, s, exact, after, ref_err)
    cands = _scaled_candidates(a, b, sa, sb, bias, num)
    chosen = num.accumulate if num.accumulate in cands else ""
    return Prepared(exact, bound, exact.shape, cands, chosen)


FP8_GROUP = 32  # products one fp8 tensor-core k-block sums before its accumulator add


def fp8_accumulate(p, m: int, every: int, reverse: bool) -> np.ndarray:
    """The fp8 accumulation models on products p (rows, cols, K), float64: each k-block of
    FP8_GROUP products summed exactly, added to an accumulator truncated to m mantissa bits;
    with `every`, that accumulator is promoted into a float32 sum every `every` k-steps."""
    from tilepy.precision.gemm import trunc_bits

    k = p.shape[-1]
    pad = -k % FP8_GROUP
    if pad:
        p = np.concatenate([p, np.zeros(p.shape[:-1] + (pad,))], -1)
    g = p.reshape(p.shape[:-1] + (-1, FP8_GROUP)).sum(-1)
    steps = range(g.shape[-1] - 1, -1, -1) if reverse else range(g.shape[-1])
    acc = np.zeros(p.shape[:-1])
    total = np.zeros(p.shape[:-1], np.float32)
    for n, j in enumerate(steps, 1):
        acc = trunc_bits(acc + g[..., j], m)
        if every and (n * FP8_GROUP) % every == 0:
            total, acc = total + acc.astype(np.float32), np.zeros_like(acc)
    return (total + acc.astype(np.float32)).astype(np.float64) if every else acc


def _scaled_candidates(a, b, sa, sb, bias, num) -> dict:
    def finish(acc, rows, cols):
        sa_r = np.float32(sa) if np.ndim(sa) == 0 else sa[rows].astype(np.float32)
        sb_c = np.float32(sb) if np.ndim(sb) == 0 else sb[:, cols].astype(np.float32)
        v = (acc.astype(np.float32) * sa_r * sb_c).astype(np.float64)
        return v + (bias[cols] if bias is not None else 0)

    def model(mode):
        def cand(rows, cols):
            xa, xb = f64(np.asarray(a)[rows]), f64(np.asarray(b)[:, cols])
            if mode == "fp32":
                ideal = mm(xa, xb)
                impl = mm(xa.astype(np.float32), xb.astype(np.float32)).astype(np.float64)
            else:  # two k orders: the model's own order noise
                p = xa[:, None, :] * xb.T[None, :, :]
                every = num.promote_every if mode == "promote" else 0
                ideal, impl = (fp8_accumulate(p, num.mantissa_bits, every, r)
                               for r in (False, True))
            return finish(ideal, rows, cols), finish(impl, rows, cols)
        return cand
    return {"fp32": model("fp32"), "fast": model("fast"), "promote": model("promote")}


# ---------------------------------------------------------------- conv2d


def _to_oihw(w, layout: str):
    if layout == "OIHW":
        return w
    if layout == "OHWI":
        return np.transpose(w, (0, 3, 1, 2))
    if layout == "HWIO":
        return np.transpose(w, (3, 2, 0, 1))
    raise ValueError(layout)


def conv_nchw(x, w, stride, padding, dilation, groups, dtype=np.float64):
    """Direct conv2d in `dtype` (x NCHW, w OIHW): an einsum per group over im2col windows."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x.astype(dtype), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype)
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dilation[0], j * dilation[1]
            cols[:, :, i, j] = xp[:, :, h0:h0 + stride[0] * (oh - 1) + 1:stride[0],
                                  w0:w0 + stride[1] * (ow - 1) + 1:stride[1]]
    out = np.empty((n, f, oh, ow), dtype)
    fg = f // groups
    for g in range(groups):
        patch = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[g * fg:(g + 1) * fg].reshape(fg, cg * kh * kw).astype(dtype)
        out[:, g * fg:(g + 1) * fg] = np.matmul(wg, patch).reshape(n, fg, oh, ow)
    return out


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _conv_candidates(x, w, geo, bias, back, view, dts) -> dict:
    """fp32 and (for inputs of more than 10 mantissa bits) tf32 convs: float64 on the
    (rounded) inputs, and a float32 direct conv, on the whole output."""
    def model(pre):
        def run():
            xx = x.astype(np.float32) if pre is None else pre(x.astype(np.float32))
            ww = w.astype(np.float32) if pre is None else pre(w.astype(np.float32))
            ideal = conv_nchw(f64(xx), f64(ww), *geo)
            impl = conv_nchw(np.asarray(xx, np.float32), np.asarray(ww, np.float32), *geo,
                             dtype=np.float32).astype(np.float64)
            if bias is not None:
                ideal, impl = ideal + bias, impl + bias
            return tuple(back(t).reshape(view) for t in (ideal, impl))
        return grid(run)
    cands = {"fp32": model(None)}
    if max(get_format(d).man_bits for d in dts) > 10:
        cands["tf32"] = model(_tf32("nearest"))
        cands["tf32 (truncated inputs)"] = model(_tf32("truncate"))
    return cands


@register("conv2d", ["x", "weight"], ["bias"])
def conv2d(inp, num: Numerics) -> Prepared:
    o = num.options
    layout = str(o.get("layout", "NCHW")).upper()
    wl = str(o.get("weight_layout", "OIHW" if layout == "NCHW" else "HWIO")).upper()
    x, w = np.asarray(inp["x"]), _to_oihw(np.asarray(inp["weight"]), wl)
    if layout == "NHWC":
        x = np.transpose(x, (0, 3, 1, 2))
    geo = (_pair(o.get("stride", 1)), _pair(o.get("padding", 0)),
           _pair(o.get("dilation", 1)), int(o.get("groups", 1)))
    X, W = f64(x), f64(w)
    exact = conv_nchw(X, W, *geo)
    s = conv_nchw(np.abs(X), np.abs(W), *geo)
    k = w.shape[1] * w.shape[2] * w.shape[3]
    s = s * (1 + gamma(k, bounds.U64))
    bias = f64(inp["bias"]).reshape(1, -1, 1, 1) if inp.get("bias") is not None else None
    if bias is not None:
        exact = exact + bias
    dts = [dtype_of(x), dtype_of(w)]
    bound = bounds.gemm_bound(num, dts, k, s, exact, int(bias is not None),
                              bounds.reference_error(k, s))
    prob = _prob(num, dts, k, s, exact, int(bias is not None), bounds.reference_error(k, s))
    back = (lambda t: np.transpose(t, (0, 2, 3, 1))) if layout == "NHWC" else (lambda t: t)
    exact, bound = back(exact), back(bound)
    prob = None if prob is None else back(prob)
    view = (exact.size // exact.shape[-1], exact.shape[-1])
    cands = _conv_candidates(x, w, geo, bias, back, view, dts)
    chosen = num.accumulate if num.accumulate in cands else ""
    return Prepared(exact, bound, view, cands, chosen, prob_bound=prob)
