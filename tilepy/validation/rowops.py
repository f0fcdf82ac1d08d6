"""Row-wise ops for `validate`: softmax, layernorm, rmsnorm, cross-entropy, attention.

Each registers its exact float64 result, its sound bound (bounds.py) and its candidate
models: "compute float32" (every intermediate in float32) against "compute <narrow dtype>"
(intermediates rounded to the storage dtype), and for attention the probabilities held in
float32 or rounded to the storage dtype before P V (as flash attention does).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tilepy.precision.formats import get_format
from tilepy.validation import bounds
from tilepy.validation.models import Numerics, round_out
from tilepy.validation.ops import OPS, Prepared, dtype_of, f64, grid, register


def rnd(v, dtype) -> np.ndarray:
    return round_out(v, dtype)


def _narrow(dtype) -> bool:
    return get_format(dtype).bits < 32


def _view(t):
    return t.reshape(-1, t.shape[-1])


def _computes(num: Numerics, storage: str) -> list[str]:
    out = ["float32"]
    if _narrow(storage):
        out.append(storage)
    if num.compute not in out:
        out.append(num.compute)
    return out


def _prepared(exact, bound, num, run, computes, label="compute", back=None) -> Prepared:
    """Candidates "compute <c>" from run(c, impl) -> output array (float64); `back` puts
    the reduced axis back where the output has it."""
    back = back or (lambda t: t)

    def cand(c):
        return grid(lambda: tuple(_view(back(run(c, impl))) for impl in (False, True)))
    cands = {f"{label} {c}": cand(c) for c in computes}
    chosen = f"{label} {num.compute}"
    exact, bound = back(exact), back(bound)
    return Prepared(exact, bound, _view(exact).shape, cands, chosen if chosen in cands else "")


def _ops(c, impl):
    """(rounding, exp, sum) of a candidate: float64 rounded to c after each step when c is
    narrower than float32, else exact (ideal: float32's roundings are the order noise that
    the impl measures), or numpy in float32 rounded to c after each step (impl)."""
    if not impl:
        r = (lambda v: rnd(v, c)) if _narrow(c) else (lambda v: np.asarray(v, np.float64))
        return r, np.exp, (lambda v, ax: np.sum(v, ax, keepdims=True))

    def r(v):
        return rnd(np.asarray(v, np.float32), c)
    return (r, lambda v: np.exp(np.asarray(v, np.float32)).astype(np.float64),
            lambda v, ax: np.sum(np.asarray(v, np.float32), ax, keepdims=True,
                                 dtype=np.float32).astype(np.float64))


# ---------------------------------------------------------------- softmax


def softmax_exact(x):
    e = np.exp(x - np.max(x, -1, keepdims=True))
    return e / np.sum(e, -1, keepdims=True)


@register("softmax", ["x"])
def softmax(inp, num: Numerics) -> Prepared:
    dim = int(num.options.get("dim", -1))
    x = np.moveaxis(np.asarray(inp["x"]), dim, -1)
    X = f64(x)
    exact = softmax_exact(X)
    bound = bounds.softmax_bound(num, X, exact)

    def run(c, impl):
        r, ex, sm = _ops(c, impl)
        e = r(ex(r(X - X.max(-1, keepdims=True))))
        return r(e / sm(e, -1))
    return _prepared(exact, bound, num, run, _computes(num, dtype_of(x)),
                     back=lambda t: np.moveaxis(t, -1, dim))


# ---------------------------------------------------------------- norms


def _eps(num, default):
    return float(num.eps if num.eps is not None else default)


@register("layernorm", ["x"], ["weight", "bias"])
def layernorm(inp, num: Numerics) -> Prepared:
    X = f64(inp["x"])
    g = f64(inp["weight"]) if inp.get("weight") is not None else None
    b = f64(inp["bias"]) if inp.get("bias") is not None else None
    eps = _eps(num, 1e-5)
    mu = X.mean(-1, keepdims=True)
    var = ((X - mu) ** 2).mean(-1, keepdims=True)
    exact = (X - mu) / np.sqrt(var + eps) * (1 if g is None else g) + (0 if b is None else b)
    bound = bounds.layernorm_bound(num, X, g, b, eps, exact)

    def run(c, impl):
        r, _, sm = _ops(c, impl)
        n = X.shape[-1]
        m = r(sm(X, -1) / n)
        d = r(X - m)
        v = r(sm(r(d * d), -1) / n)
        y = r(d * r(1 / np.sqrt(r(v + eps))))
        y = r(y * g) if g is not None else y
        return r(y + b) if b is not None else y
    return _prepared(exact, bound, num, run, _computes(num, dtype_of(inp["x"])))


@register("rmsnorm", ["x"], ["weight"])
def rmsnorm(inp, num: Numerics) -> Prepared:
    X = f64(inp["x"])
    w = f64(inp["weight"]) if inp.get("weight") is not None else None
    eps = _eps(num, 1e-6)
    rstd = 1 / np.sqrt((X * X).mean(-1, keepdims=True) + eps)
    exact = X * rstd * (1 if w is None else w)
    bound = bounds.rmsnorm_bound(num, X, w, eps, exact)
    storage = dtype_of(inp["x"])

    def run(c, impl, mid=None):
        r, _, sm = _ops(c, impl)
        ms = r(sm(r(X * X), -1) / X.shape[-1])
        y = r(X * r(1 / np.sqrt(r(ms + eps))))
        y = rnd(y, mid) if mid else y
        return r(y * w) if w is not None else y
    prep = _prepared(exact, bound, num, run, _computes(num, storage))
    if _narrow(storage) and w is not None:  # x * rstd rounded to the storage dtype first
        prep.candidates[f"x*rstd rounded to {storage}"] = grid(
            lambda: tuple(_view(run("float32", i, storage))
                          for i in (False, True)))
    return prep


# ---------------------------------------------------------------- cross-entropy


@register("cross_entropy", ["x", "target"])
def cross_entropy(inp, num: Numerics) -> Prepared:
    X = f64(inp["x"])
    t = np.asarray(inp["target"]).astype(np.int64)
    red = num.options.get("reduction", "none")
    ignore = int(num.options.get("ignore_index", -100))
    valid = t != ignore
    tt = np.where(valid, t, 0)
    xt = np.take_along_axis(X, tt[:, None], 1)[:, 0]
    m = X.max(-1)
    lse = m + np.log(np.exp(X - m[:, None]).sum(-1))
    loss = np.where(valid, lse - xt, 0.0)
    err = np.where(valid, bounds.cross_entropy_bound(num, X, softmax_exact(X), xt, loss), 0)
    if red == "none":
        exact, delta = loss, err
    else:
        nv = max(int(valid.sum()), 1) if red == "mean" else 1
        exact = np.asarray(loss.sum() / nv)
        delta = np.asarray((err.sum() + bounds.gamma(len(loss) + 1, num.u(num.compute))
                            * (np.abs(loss).sum() + err.sum())) / nv)
    bound = bounds.finish(num, delta, exact, 0)
    if red != "none":
        return Prepared(exact, bound, (1, 1), {}, "")

    def run(c, impl):
        r, ex, sm = _ops(c, impl)
        mm = X.max(-1, keepdims=True)
        ls = r(np.log(sm(r(ex(r(X - mm))), -1)))
        return np.where(valid, r(r(mm + ls)[:, 0] - xt), 0.0)
    prep = _prepared(exact, bound, num, lambda c, i: run(c, i)[:, None],
                     _computes(num, dtype_of(inp["x"])))
    prep.view = (exact.size, 1)
    return prep


# ---------------------------------------------------------------- attention


def _heads(k, hq):
    hk = k.shape[1]
    return np.repeat(k, hq // hk, axis=1) if hk != hq else k


@register("attention", ["q", "k", "v"])
def attention(inp, num: Numerics) -> Prepared:
    q, k, v = (np.asarray(inp[r]) for r in ("q", "k", "v"))
    Q, K, V = f64(q), _heads(f64(k), q.shape[1]), _heads(f64(v), q.shape[1])
    d = q.shape[-1]
    scale = float(num.options.get("scale") or 1 / np.sqrt(d))
    sq, sk = q.shape[-2], k.shape[-2]
    mask = np.tril(np.ones((sq, sk), bool)) if num.options.get("causal") else None
    s = Q @ np.swapaxes(K, -1, -2) * scale
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    p = softmax_exact(s)
    exact = p @ V
    sqk = np.abs(Q) @ np.swapaxes(np.abs(K), -1, -2) * scale
    uc = num.u(num.compute)
    s_err = bounds.dot_coefficient(num, [dtype_of(q), dtype_of(k)], d) * sqk \
        + 2 * uc * np.abs(np.where(np.isfinite(s), s, 0)) + bounds.reference_error(d, sqk)
    valid = sk if mask is None else sk
    bound = bounds.attention_bound(num, s, s_err, p @ np.abs(V), exact, valid, dtype_of(v))

    def run(pdt, impl):
        r, ex, sm = _ops("float32", impl)
        st = r(s) if impl else s
        e = ex(st - st.max(-1, keepdims=True))
        e = np.where(np.isfinite(st), r(e), 0.0)
        l_ = sm(e, -1)
        pv = rnd(e, pdt) @ V if not impl else \
            (rnd(e, pdt).astype(np.float32) @ V.astype(np.float32)).astype(np.float64)
        return r(pv / l_)
    probs = num.intermediate.get("probs", "float32")
    options = ["float32"] + ([dtype_of(v)] if _narrow(dtype_of(v)) else [])
    if probs not in options:
        options.append(probs)
    prep = _prepared(exact, bound, num, run, options, label="probs")
    prep.chosen = f"probs {probs}"
    return prep


def attention_defaults(inputs) -> dict:
    v = inputs.get("v")
    if v is not None and _narrow(dtype_of(v)):
        return {"intermediate": {"probs": dtype_of(v)}}
    return {}


OPS["attention"] = replace(OPS["attention"], defaults=attention_defaults)
