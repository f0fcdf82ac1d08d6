"""The statistical tier: is the output's error the error the configured model makes?

Three tests, each returning its numbers: (1) model fit: on a sub-grid, the output's
distance to each candidate model's order-free result, in units of that model's own order
noise (the spread between two implementations of it, floored at half an output ulp);
(2) mean bias of the output against the configured model, signed and sign-weighted;
(3) groups: rows, columns and tiles whose squared normalised error stands out from the
median group. Probabilistic: unlike bounds.py, a correct output may fail here, rarely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilepy.validation import bounds
from tilepy.validation.models import round_out, ulp

FIT_OK = 4.0        # a model fits when the output's rms deviation is <= 4x its noise
LL_GAP = 25.0       # ... and no other model is e^25 times likelier (total log-likelihood)
BIAS_Z = 6.0        # a bias must be this many standard errors from zero,
BIAS_MIN = 0.5      # at least half the model's noise,
BIAS_SHARE = 0.8    # and most of the error (a constant shift is ~100% of it)
GROUP_FACTOR = 16.0  # a group stands out when its mean z^2 is 16x the median group's
GROUP_Z2 = 64.0      # and 64 (its rms error 4x the median's and 8x the model's noise),
GROUP_T = 5.0       # or its scale error 5 standard errors from zero
SCALE_FACTOR = 10.0  # and 10x the median group's (row-normalised ops share scale errors)
SAMPLE = 4096       # sub-grid elements for the model fits
WORK = 2 ** 23      # sub-grid elements x depth the fits may spend


@dataclass
class Fit:
    name: str
    ratio: float      # rms of (output - model) / the model's noise, per element
    loglik: float     # mean Gaussian log-likelihood per element
    spread: float     # the model's order noise, relative to the sound bound (rms)
    consistent: bool = True
    why: str = ""


@dataclass
class Stats:
    passed: bool
    fits: list = field(default_factory=list)
    chosen: str = ""
    summary: str = ""
    bias: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)   # (kind, index, value, threshold, what)
    evidence: list = field(default_factory=list)
    prob_over: int = -1   # elements over the probabilistic sqrt(K) bound (-1: not derived)


def sample(view, depth: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Evenly spaced rows and columns of the 2-D view: a sub-grid of <= SAMPLE elements
    whose simulation costs <= WORK element-steps."""
    r, c = view
    n = max(16, min(SAMPLE, WORK // max(depth, 1)))
    nc = min(c, max(1, int(np.sqrt(n))) if r > 1 else n)
    nr = min(r, max(1, n // nc))
    return (np.unique(np.linspace(0, r - 1, nr).astype(int)),
            np.unique(np.linspace(0, c - 1, nc).astype(int)))


def _memo(cand, rows, cols):
    """A candidate's sub-grid result, kept on the function (a prepared check reuses it)."""
    key = (rows.tobytes(), cols.tobytes())
    memo = cand.__dict__.setdefault("memo", {})
    if key not in memo:
        memo.clear()
        memo[key] = cand(rows, cols)
    return memo[key]


def fit_models(out2d, exact2d, bound2d, cands: dict, rows, cols, dtype) -> tuple[list, dict]:
    """A `Fit` per candidate. Each model's per-element noise: sigma^2 = k^2 w^2 + ulp^2/12,
    w the sound bound (it scales like the element's sum |a||b|), k^2 the mean of
    ((impl - ideal) / w)^2, the spread of two implementations of the model (two orders),
    ulp^2/12 the output rounding. z = (output - ideal) / sigma. Likelihoods compare the
    models on the elements where some model's noise exceeds the output rounding (where
    rounding dominates, the Gaussian picture says nothing), when there are 64 of them."""
    ix = np.ix_(rows, cols)
    o, w0, ex = out2d[ix], bound2d[ix], exact2d[ix]
    parts = {}
    for name, cand in cands.items():
        raw, impl = _memo(cand, rows, cols)
        ideal = round_out(raw, dtype)
        r2 = ulp(ideal, dtype) ** 2 / 12
        w = np.where(w0 > 0, w0, np.sqrt(r2))
        ok = np.isfinite(o) & np.isfinite(ideal) & np.isfinite(impl) & np.isfinite(w)
        if ok.any():
            k2 = float(np.mean(((impl - raw)[ok] / w[ok]) ** 2))
            parts[name] = (ideal, k2 * w ** 2 + r2, ok, k2, w, r2)
    common = np.logical_and.reduce([p[2] for p in parts.values()]) if parts else None
    informative = None
    if parts:
        informative = common & np.logical_or.reduce([p[3] * p[4] ** 2 > p[5]
                                                     for p in parts.values()])
        if informative.sum() < 64:
            informative = common
    fits, keep = [], {}
    for name, (ideal, var, ok, k2, w, _) in parts.items():
        z = (o - ideal) / np.sqrt(var)
        t = float(np.mean(z[ok] ** 2))
        m = informative
        ll = float(np.mean(-0.5 * z[m] ** 2 - 0.5 * np.log(var[m]))) if m.any() else 0.0
        fits.append(Fit(name, float(np.sqrt(t)), ll, float(np.sqrt(k2))))
        dev2 = float(np.mean(((ideal - ex)[ok] / w[ok]) ** 2))
        keep[name] = (ideal, var, ok, max(k2, dev2), int(m.sum()))
    _mark(fits, keep)
    return fits, keep


def _mark(fits: list, keep: dict) -> None:
    """A fit is inconsistent when its deviation exceeds FIT_OK noise units or another
    model is e^LL_GAP times likelier."""
    best = max((f.loglik for f in fits), default=0.0)
    for f in fits:
        n = keep[f.name][4]
        if f.ratio > FIT_OK:
            f.consistent, f.why = False, f"its deviation is {f.ratio:.3g}x its noise"
        elif n * (best - f.loglik) > LL_GAP:
            f.consistent = False
            f.why = f"another model is e^{n * (best - f.loglik):.3g} times likelier"


def bias_test(z: np.ndarray, sgn: np.ndarray) -> dict:
    """Signed and sign-weighted mean of z = (output - model) / sigma on the sub-grid."""
    res = {"n": int(z.size), "rms": float(np.sqrt(np.mean(z * z))) if z.size else 0.0}
    for key, v in (("mean", z), ("sign_mean", z * sgn)):
        m = float(v.mean()) if v.size else 0.0
        se = float(v.std() / np.sqrt(v.size)) if v.size > 1 else np.inf
        t = m / se if se > 0 else (0.0 if m == 0 else np.inf)
        res[key], res[key + "_z"] = m, t
        res[key + "_flagged"] = bool(abs(t) > BIAS_Z and abs(m) > BIAS_MIN
                                     and abs(m) > BIAS_SHARE * res["rms"])
    res["flagged"] = res["mean_flagged"] or res["sign_mean_flagged"]
    return res


def _dots(x: np.ndarray, w: np.ndarray, tile: tuple) -> list:
    """(kind, per-group sum of x * w, group size, index function) for rows, columns and
    tiles of the 2-D view, each one fused pass (einsum, no temporary)."""
    r, c = x.shape
    th, tw = min(tile[0], r), min(tile[1], c)
    tr, tc = r // th, c // tw
    out = [("row", np.einsum("ij,ij->i", x, w), c, int),
           ("column", np.einsum("ij,ij->j", x, w), r, int)]
    if tr * tc >= 4:
        x4 = x[:tr * th, :tc * tw].reshape(tr, th, tc, tw)
        w4 = w[:tr * th, :tc * tw].reshape(tr, th, tc, tw)
        out.append(("tile", np.einsum("abcd,abcd->ac", x4, w4).ravel(), th * tw,
                    lambda i: (int(i) // tc, int(i) % tc)))
    return out


def group_test(e: np.ndarray, y: np.ndarray, var: np.ndarray, tile: tuple) -> list:
    """Rows, columns and tiles that stand out from the others, by two statistics: mean z^2
    (z = e / sigma) above GROUP_FACTOR x the median group's and GROUP_Z2 (plus 8 pooled
    standard errors); and the t-value
    of the group's scale error (the weighted least-squares slope of e on y: a scaled row)
    above SCALE_FACTOR x the median group's and GROUP_T. Rows of row-normalised ops share
    a scale error naturally; the median-relative thresholds absorb it."""
    with np.errstate(all="ignore"):
        inv = np.reciprocal(var, out=var)  # var is the caller's scratch
        ey = e * inv
        yi = np.multiply(y, inv, out=inv)
    bad = ~np.isfinite(ey) | ~np.isfinite(yi)
    if bad.any():
        e, y, ey, yi = (np.where(bad, 0, t) for t in (e, y, ey, yi))
    sub = (e * ey)[::7, ::3]  # the pooled spread of z^2, from a sub-sample
    sd = float(sub.std()) if sub.size else 0.0
    z2 = [(k, q / n, n, f) for k, q, n, f in _dots(e, ey, tile)]
    tvals = [(k, np.abs(a) / np.sqrt(np.where(b > 0, b, np.inf)), n, f)
             for (k, a, n, f), (_, b, _, _) in zip(_dots(y, ey, tile), _dots(y, yi, tile))]
    flagged = []
    for label, groups, floor in (("mean z^2", z2, GROUP_Z2), ("scale-error t", tvals, GROUP_T)):
        factor = GROUP_FACTOR if label == "mean z^2" else SCALE_FACTOR
        for kind, q, n, index in groups:
            if q.size < 4:
                continue
            thr = max(factor * float(np.median(q)), floor)
            thr += 8 * sd / np.sqrt(n) if label == "mean z^2" else 0.0
            for i in np.flatnonzero(q > thr)[:8]:
                flagged.append((kind, index(i), float(q[i]), thr, label))
    return flagged


def _prob_test(st, err, prob, strict: bool) -> bool:
    """Elements over the probabilistic sqrt(K) bound (each one has probability < 3e-8 when
    the roundings are independent and mean-zero): evidence, and a failure only under
    rounding="nearest" (truncating accumulators break the independence)."""
    with np.errstate(invalid="ignore"):
        over = int(np.count_nonzero(~(np.abs(err) <= prob)))
    st.evidence.append(f"{over} of {err.size} elements over the probabilistic sqrt(K) bound "
                       f"(lambda {bounds.LAMBDA:g}; max error/bound "
                       f"{float(np.nanmax(np.abs(err) / prob)) if err.size else 0:.3g})")
    st.prob_over = over
    return not (strict and over)


def _k2_data(err, bound) -> float:
    """The output's own typical (error / bound)^2, robustly (the median of a chi-square
    of one degree is 0.455), from a sub-sample: the group tests' noise floor when the model
    has none (a kernel as the reference) or underestimates it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (err[::5, ::3] / bound[::5, ::3]).ravel()
    r = r[np.isfinite(r)]
    return float(np.median(r * r) / 0.455) if r.size else 0.0


def run(out2d, exact2d, bound2d, prep, dtype, tile, depth, err2d=None,
        strict=False) -> Stats:
    """The statistical tier on the output's 2-D view: model fits on a sub-grid, the bias
    against the configured (else the likeliest) model, the probabilistic bound, groups."""
    if out2d.size == 0:
        return Stats(passed=True, summary="no elements")
    rows, cols = sample(prep.view, depth)
    fits, keep = fit_models(out2d, exact2d, bound2d, prep.candidates, rows, cols, dtype)
    st = Stats(passed=True, fits=fits, chosen=prep.chosen)
    ref = _classify(st, fits, prep.chosen)
    k2 = 0.0
    if ref is not None:
        ideal, var, ok, k2, _ = keep[ref.name]
        z = ((out2d[np.ix_(rows, cols)] - ideal) / np.sqrt(var))[ok]
        st.bias = b = bias_test(z, np.sign(ideal[ok]))
        st.evidence.append(f"bias vs {ref.name}: mean {b['mean']:+.3g} (t {b['mean_z']:+.3g}), "
                           f"sign-weighted {b['sign_mean']:+.3g} (t {b['sign_mean_z']:+.3g}), "
                           f"rms {b['rms']:.3g}, in noise units over {b['n']} elements")
        st.passed &= not b["flagged"]
    err2d = out2d - exact2d if err2d is None else err2d
    if prep.prob_bound is not None:
        st.passed &= _prob_test(st, err2d, prep.prob_bound.reshape(err2d.shape), strict)
    var = _noise(exact2d, bound2d, err2d, dtype, k2)
    st.groups = group_test(err2d, exact2d, var, tile)
    for kind, idx, q, thr, label in st.groups:
        st.evidence.append(f"{kind} {idx}: {label} {q:.3g} > {thr:.3g}")
    st.passed &= not st.groups
    return st


def _classify(st: Stats, fits: list, chosen_name: str):
    """Summary and evidence of the fits; fails `st` when no model of the configured kind
    fits. Returns the fit the bias is measured against."""
    chosen = [f for f in fits if f.name == chosen_name or f.name.startswith(chosen_name + " ")]
    good = [f.name for f in fits if f.consistent]
    bad = [f.name for f in fits if not f.consistent]
    if fits:
        st.summary = (f"consistent with {', '.join(good) or 'no candidate'}"
                      + (f", not with {', '.join(bad)}" if bad else ""))
        st.evidence += [f"model {f.name}: deviation {f.ratio:.3g}x its noise (noise "
                        f"{f.spread:.3g} of the bound), log-likelihood {f.loglik:.4g}: "
                        + ("fits" if f.consistent else f"does not fit: {f.why}") for f in fits]
    if chosen and not any(f.consistent for f in chosen):
        st.passed = False
    return max(chosen or fits, key=lambda f: f.loglik) if fits else None


def _noise(exact2d, bound2d, err2d, dtype, k2) -> np.ndarray:
    """sigma^2 per element of the whole output (a fresh array the caller may overwrite):
    the output rounding plus the model's (or the output's own) noise scaled by the bound."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if exact2d.dtype == np.float32 and dtype == "float32":
            var = np.abs(exact2d)
            np.spacing(var, out=var)  # the float32 ulp
        else:
            var = ulp(exact2d, dtype)
        np.multiply(var, var, out=var)
        var *= 1 / 12
        var += max(k2, _k2_data(err2d, bound2d)) * (bound2d * bound2d)
    return var
