"""Derived error bounds for the library kernels beyond checks.py's reference kernels:
training attention (forward, logsumexp and gradients), CSR SpMM and SDDMM on power-law
matrices, top-k, cumsum, embedding bag and cross-entropy. Each case pairs the kernel's
inputs with a float64 numpy reference computed without tilepy and a per-element bound
(comments derive each; u = U32 = 2^-24, the float32 unit roundoff).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilepy.kernels.checks import EXP2_U, EXP_U, U32, Case, gamma, unit_roundoff


@dataclass
class MultiCase:
    """Several outputs of one computation, each with its reference and bound."""
    name: str
    inputs: dict
    refs: dict
    bounds: dict

    def check(self, outs: dict) -> dict:
        """name -> (max error, max error / bound, passes)."""
        res = {}
        for k, ref in self.refs.items():
            out = np.asarray(outs[k]).astype(np.float64)
            same = out == ref  # equal infinities (lse -inf of a row that sees no key) match
            c = Case(k, "float32", "", None, [], np.where(same, 0.0, ref), self.bounds[k])
            out = np.where(same, 0.0, out)
            res[k] = (*c.error(out), c.passes(out))
        return res


# ---------------------------------------------------------------- attention


def _packed_mask(cu_q, cu_k, causal):
    """Which key row each query row sees: its own sequence's, and with causal the keys at
    positions <= the query's (True or 'top_left': torch SDPA's is_causal), or <= the
    query's + Lk - Lq of the sequence ('bottom_right': flash-attn's)."""
    def seq_pos(cu):
        seq = np.repeat(np.arange(len(cu) - 1), np.diff(cu))
        return seq, np.arange(cu[-1]) - cu[seq]
    (sq, pq), (sk, pk) = seq_pos(cu_q), seq_pos(cu_k)
    ok = sq[:, None] == sk[None, :]
    if not causal:
        return ok
    shift = (np.diff(cu_k) - np.diff(cu_q))[sq] if causal == "bottom_right" else 0
    return ok & (pk[None, :] <= (pq + shift)[:, None])


def attention_train_case(rng, lengths, heads, kv_heads, dim, causal, varlen,
                         lengths_k=None, dtype="float32") -> MultiCase:
    """Inputs for tilepy.kernels.attention_api (fixed: equal lengths, (B, H, S, D)),
    references and bounds for o, lse, dq, dk, dv, for any tiles of at least 16 rows.
    lengths_k: the keys' lengths when they differ from the queries' (cross-attention);
    dtype: the inputs' (float32, bfloat16, float16), the reference uses their exact values."""
    lengths_k = lengths if lengths_k is None else lengths_k
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
                  for n in (lengths, lengths_k))
    Tq, Tk, g = int(cu_q[-1]), int(cu_k[-1]), heads // kv_heads
    pk = [rng.standard_normal((t, h, dim)).astype(np.float32).astype(np.dtype(dtype))
          for t, h in ((Tq, heads), (Tk, kv_heads), (Tk, kv_heads), (Tq, heads))]
    q, k, v, do = (x.astype(np.float64).transpose(1, 0, 2) for x in pk)  # (H, T, D)
    r = _attention_f64(q, np.repeat(k, g, 0), np.repeat(v, g, 0), do,
                       _packed_mask(cu_q, cu_k, causal))
    Sq, Sk, ulp = int(max(lengths)), int(max(lengths_k)), unit_roundoff(dtype)
    bnd = _forward_bounds(r, Sk, ulp)
    bnd.update(_grad_bounds(r, bnd, Sq, Sk, g))

    def group_sum(x):  # (H, T, D) -> (KH, T, D): a KV head's gradient sums its group
        return x.reshape(kv_heads, g, Tk, dim).sum(1)

    for key in ("dk", "dv"):
        r[key], bnd[key] = group_sum(r[key]), group_sum(bnd[key])
    lay_q, lay_k = _to_layout(varlen, cu_q), _to_layout(varlen, cu_k)
    inputs = {n: lay(x) for n, lay, x in zip("q k v do".split(), (lay_q, lay_k, lay_k, lay_q),
                                             pk)}
    inputs.update(causal=causal, cu_seqlens=cu_q if varlen else None,
                  cu_seqlens_k=cu_k if varlen else None)
    lays = {"o": lay_q, "lse": lay_q, "dq": lay_q, "dk": lay_k, "dv": lay_k}
    refs, bounds = ({n: lay(np.moveaxis(d[n], 0, 1) if d[n].ndim == 3 else d[n].T)
                     for n, lay in lays.items()} for d in (r, bnd))
    cross = "" if list(lengths_k) == list(lengths) else "cross "
    mode = {False: "", True: "causal "}.get(causal, f"causal {causal} ")
    return MultiCase(f"attention train {cross}{mode}"
                     f"{'varlen ' if varlen else ''}H{heads}/KV{kv_heads} {dtype}", inputs,
                     refs, bounds)


def _attention_f64(q, k, v, do, mask) -> dict:
    """Every intermediate of attention and its gradients in float64, (H, T, ...) arrays.
    A query row that sees no key has p = 0 (o = 0, zero gradients) and lse = -inf."""
    sm = 1 / math.sqrt(q.shape[-1])
    s = np.where(mask, q @ k.transpose(0, 2, 1) * sm, -np.inf)
    seen = np.broadcast_to(mask.any(-1)[:, None], s.shape[:-1] + (1,))
    m = np.where(seen, s.max(-1, keepdims=True), 0.0)
    e = np.exp(s - m)
    den = np.where(seen, e.sum(-1, keepdims=True), 1.0)
    p = e / den
    o = p @ v
    dP = do @ v.transpose(0, 2, 1)
    delta = (do * o).sum(-1, keepdims=True)
    dS = p * (dP - delta)
    return {"q": q, "k": k, "v": v, "do": do, "s": s, "m": m, "p": p, "o": o, "dP": dP,
            "delta": delta, "dS": dS, "lse": np.where(seen, m + np.log(den), -np.inf)[..., 0],
            "sm": sm,
            "dq": dS @ k * sm, "dk": dS.transpose(0, 2, 1) @ q * sm,
            "dv": p.transpose(0, 2, 1) @ do}


def _forward_bounds(r: dict, S: int, ulp: float = U32) -> dict:
    """o and lse, and the facts the gradients' bounds reuse; S is the most keys a query
    sees, ulp the inputs' unit roundoff (U32 for float32)."""
    # as checks.attention_case: scores carry D adds, the exponent's absolute error
    # (spread + D * qk terms) becomes P's relative error, rows add S terms, each of at most
    # S/16 tiles rescales with 2 roundings and an exp2, the divide one: c relative to sum p|v|
    D, nb = r["q"].shape[-1], math.ceil(S / 16)
    lse = np.where(np.isfinite(r["lse"]), r["lse"], 0.0)  # -inf: rows that see no key
    fin = np.isfinite(r["s"])
    spread = float(np.max(np.where(fin, r["m"] - r["s"], 0)))
    qk = float((np.abs(r["q"]) @ np.abs(r["k"]).transpose(0, 2, 1)).max()) * r["sm"]
    c = (S + D + (4 + EXP2_U) * nb + 8 + EXP2_U + 2 * (spread + D * qk)) * U32 * 1.01
    # narrower inputs: products stay exact in float32; P is rounded to the inputs' dtype
    # before P V (ulp relative to sum p|v|) and o once when stored (ulp |o|)
    low = 0.0 if ulp == U32 else ulp
    b_o = (c + low) * (r["p"] @ np.abs(r["v"])) * 1.01 + low * np.abs(r["o"])
    # lse = (m*scale2 + log2 den) ln2: the max moves with its score (D*qk u), log2 of a sum
    # off by c relative moves by c/ln2, three roundings of values up to |lse| + |m|.
    b_lse = (c + D * qk * U32 + 4 * U32 * (np.abs(lse) + np.abs(r["m"][..., 0]))) * 1.01
    # backward P = exp2(s scale2 - lse log2e): exponent off by the score's D*qk u, lse's
    # bound, 3 roundings of values up to |s| + |lse|; exp2 adds EXP2_U: relative rP.
    big = np.max(np.abs(np.where(fin, r["s"], 0))) + np.max(np.abs(lse))
    rP = float(np.max(b_lse) + D * qk * U32 + 3 * U32 * big) * 2 + EXP2_U * U32
    return {"o": b_o, "lse": b_lse, "rP": rP, "nb": nb, "low": low}


def _grad_bounds(r: dict, f: dict, Sq: int, Sk: int, g: int) -> dict:
    """dq, dk, dv: the gemms' gamma_n terms plus dS's error carried through them; Sq, Sk
    the most queries and keys of a sequence. P, dP and dS stay float32 whatever the inputs' dtype;
    narrower gradients round once more when stored (f["low"] |grad|)."""
    p, do, sm, rP = r["p"], np.abs(r["do"]), r["sm"], f["rP"]
    aq, ak, adS = np.abs(r["q"]), np.abs(r["k"]), np.abs(r["dS"])
    gd = gamma(r["q"].shape[-1] + 1)
    # Delta from the kernel's o: D products and adds, and o's own bound times |dO|
    e_delta = gd * (do * np.abs(r["o"])).sum(-1, keepdims=True) + (do * f["o"]).sum(
        -1, keepdims=True)
    diff = np.abs(r["dP"] - r["delta"])
    # dS = P (dP - Delta): dP's D terms, Delta's error, the subtraction and product (u
    # each) and P's relative error rP
    e_dS = p * (gd * (do @ np.abs(r["v"]).transpose(0, 2, 1)) + e_delta + U32 * diff) + \
        rP * p * diff + U32 * adS
    nq = g * Sq + 1  # adds into dK, dV: the group's heads times the rows, + the product
    nd = Sk + f["nb"] + 1  # dQ: the keys' products, plus one add per KV tile's partial
    u = U32 + f["low"]
    return {k: 1.05 * b for k, b in {
        "dq": sm * (gamma(nd) * adS @ ak + e_dS @ ak) + u * np.abs(r["dq"]),
        "dk": sm * (gamma(nq) * adS.transpose(0, 2, 1) @ aq + e_dS.transpose(0, 2, 1) @ aq)
        + u * np.abs(r["dk"]),
        "dv": (gamma(nq) + rP * 1.01) * (p.transpose(0, 2, 1) @ do) + f["low"] * np.abs(
            r["dv"]),
    }.items()}


def _to_layout(varlen, cu):
    """(T, H, ...) packed -> the kernel's layout: unchanged, or (B, H, S, ...) fixed."""
    def f(x):
        if varlen:
            return np.ascontiguousarray(x)
        B, S = len(cu) - 1, int(cu[1])
        return np.ascontiguousarray(np.swapaxes(x.reshape(B, S, *x.shape[1:]), 1, 2))
    return f


# ---------------------------------------------------------------- sparse


def power_law_csr(rng, M, K, alpha=1.2, empty=0.2):
    """CSR (indptr, indices, data) with Pareto(alpha) row lengths, a fraction `empty` of
    rows with no nonzero and row 1 full (K nonzeros): both ends of a power law."""
    lens = np.minimum((rng.pareto(alpha, M) * 2).astype(np.int64), K)
    lens[rng.random(M) < empty] = 0
    lens[0], lens[min(1, M - 1)] = 0, K
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(K, n, replace=False)) if n < K // 4 else
                              np.sort(rng.permutation(K)[:n]) for n in lens]
                             or [np.zeros(0, int)]).astype(np.int32)
    data = rng.standard_normal(indices.size).astype(np.float32)
    return indptr, indices, data


def _dense(indptr, indices, data, M, K):
    rows = np.repeat(np.arange(M), np.diff(indptr))
    return rows, indices, data.astype(np.float64)


def spmm_case(rng, M, K, N, alpha=1.2) -> Case:
    indptr, indices, data = power_law_csr(rng, M, K, alpha)
    b = rng.standard_normal((K, N)).astype(np.float32)
    import scipy.sparse as sp  # a runtime dependency of tilepy (DESIGN.md)

    a = sp.csr_matrix((data.astype(np.float64), indices, indptr), shape=(M, K))
    ref, absum = a @ b.astype(np.float64), abs(a) @ np.abs(b).astype(np.float64)
    # each product rounds once; a row's n nonzeros are added in pieces (each from 0) and
    # the pieces added together: n - 1 roundings in all, whatever the partition
    n = np.diff(indptr)[:, None]
    bound = (n + 1) * U32 / (1 - (n + 1) * U32) * absum + 2 * gamma(K, 2.0**-53) * absum
    return Case("spmm csr", "float32", f"{M}x{K} nnz {indices.size} x {N}", None,
                [indptr, indices, data, b], ref, bound)


def sddmm_case(rng, M, N, D, alpha=1.2) -> Case:
    indptr, indices, data = power_law_csr(rng, M, N, alpha)
    x = rng.standard_normal((M, D)).astype(np.float32)
    y = rng.standard_normal((N, D)).astype(np.float32)
    rows, cols, vals = _dense(indptr, indices, data, M, N)
    X, Y = x.astype(np.float64)[rows], y.astype(np.float64)[cols]
    ref = vals * np.einsum("kd,kd->k", X, Y)
    # D products and D - 1 adds (gamma_{D+1} of sum|x||y|), then one multiply by data (u)
    bound = np.abs(vals) * gamma(D + 2) * np.einsum("kd,kd->k", np.abs(X), np.abs(Y))
    return Case("sddmm csr", "float32", f"{M}x{N} nnz {indices.size} x {D}", None,
                [indptr, indices, data, x, y], ref, bound)


# ---------------------------------------------------------------- row kernels


def topk_reference(x: np.ndarray, k: int):
    """(values, indices): descending, ties by lowest index, NaN above everything."""
    key = np.where(np.isnan(x), np.inf, x).astype(np.float64)
    nan_first = np.lexsort((np.arange(x.shape[1])[None, :].repeat(x.shape[0], 0),
                            ~np.isnan(x), -key), axis=1) if x.size else key.astype(int)
    idx = nan_first[:, :k].astype(np.int32)
    return np.take_along_axis(x, idx, 1), idx


def cumsum_case(rng, M, N, reverse=False) -> Case:
    x = rng.standard_normal((M, N)).astype(np.float32)
    X = x.astype(np.float64)[:, ::-1] if reverse else x.astype(np.float64)
    ref, ab = np.cumsum(X, 1), np.cumsum(np.abs(X), 1)
    # y_j is j sequential float32 adds: gamma_j * sum_{i<=j}|x_i|
    j = np.arange(1, N + 1)[None, :]
    bound = j * U32 / (1 - j * U32) * ab
    if reverse:
        ref, bound = ref[:, ::-1], bound[:, ::-1]
    return Case("cumsum" + (" reverse" if reverse else ""), "float32", f"{M}x{N}", None,
                [x], ref, bound)


def embedding_bag_case(rng, V, D, bags, mode) -> Case:
    w = rng.standard_normal((V, D)).astype(np.float32)
    sizes = rng.integers(0, 9, bags)
    sizes[0] = 0
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    idx = rng.integers(0, V, off[-1]).astype(np.int32)
    W = w.astype(np.float64)
    ref, bound = np.zeros((bags, D)), np.zeros((bags, D))
    for b, (lo, hi) in enumerate(zip(off[:-1], off[1:])):
        if hi == lo:
            continue
        rows = W[idx[lo:hi]]
        n = hi - lo
        ref[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
        # max is exact; a sum is n - 1 float32 adds; the mean's divide rounds once more
        absum = np.abs(rows).sum(0) / (n if mode == "mean" else 1)
        bound[b] = 0 if mode == "max" else gamma(n) * absum + \
            (U32 * np.abs(ref[b]) if mode == "mean" else 0)
    return Case(f"embedding bag {mode}", "float32", f"{V}x{D}, {bags} bags", None,
                [w, idx, off], ref, bound)


def embedding_bag_train_case(rng, V, D, bags, mode, weighted=False,
                             dtype="float32") -> MultiCase:
    """Forward and gradients of tilepy.kernels.embedding_bag_api against float64 loops:
    out, the dense table gradient dw and (weighted) the per-sample weights' dpsw."""
    w = rng.standard_normal((V, D)).astype(np.float32).astype(np.dtype(dtype))
    sizes = rng.integers(0, 9, bags)
    sizes[0] = 0
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    idx = rng.integers(0, V, off[-1]).astype(np.int32)
    psw = rng.standard_normal(idx.size).astype(np.float32).astype(w.dtype) if weighted \
        else None
    g = rng.standard_normal((bags, D)).astype(np.float32).astype(w.dtype)
    W, G = w.astype(np.float64), g.astype(np.float64)
    P = np.ones(idx.size) if psw is None else psw.astype(np.float64)
    bag = np.repeat(np.arange(bags), sizes)
    ref, b_out = np.zeros((bags, D)), np.zeros((bags, D))
    term = np.zeros((idx.size, D))  # d out[bag p] / d w[idx p], per position
    for b, (lo, hi) in enumerate(zip(off[:-1], off[1:])):
        if hi == lo:
            continue
        rows, n = W[idx[lo:hi]] * P[lo:hi, None], hi - lo
        if mode == "max":
            ref[b] = rows.max(0)
            first = lo + np.argmax(rows == ref[b], 0)  # the first maximum's position
            term[first, np.arange(D)] = G[b]
        else:
            ref[b] = rows.sum(0) / (n if mode == "mean" else 1)
            term[lo:hi] = G[b] * P[lo:hi, None] / (n if mode == "mean" else 1)
            # n products (or 1s) and n - 1 adds from 0: gamma_n; the mean's divide once more
            b_out[b] = gamma(n) * np.abs(rows).sum(0) / (n if mode == "mean" else 1) + \
                (U32 * np.abs(ref[b]) if mode == "mean" else 0)
    dw, b_dw = np.zeros((V, D)), np.zeros((V, D))
    np.add.at(dw, idx, term)
    np.add.at(b_dw, idx, np.abs(term))
    count = np.bincount(idx, minlength=V)[:, None]
    # a row's k occurrences: a product (or divide) each, k - 1 adds from 0: gamma_k
    b_dw = np.array([gamma(int(k)) for k in count[:, 0]])[:, None] * b_dw
    low = 0.0 if dtype == "float32" else unit_roundoff(dtype)  # narrow outputs round once
    refs = {"out": ref, "dw": dw}
    bounds = {"out": b_out + low * np.abs(ref), "dw": b_dw + low * np.abs(dw)}
    if weighted:  # D products and D - 1 adds from 0
        refs["dpsw"] = np.einsum("pd,pd->p", W[idx], G[bag])
        bounds["dpsw"] = gamma(D) * np.einsum("pd,pd->p", np.abs(W[idx]), np.abs(G[bag])) \
            + low * np.abs(refs["dpsw"])
    return MultiCase(f"embedding bag {mode}{' weighted' if weighted else ''} {dtype}",
                     {"weight": w, "indices": idx, "offsets": off, "psw": psw, "dout": g},
                     refs, bounds)


def xent_case(rng, M, C, smoothing, ignore_index=-100, chunk=256) -> MultiCase:
    x, lab = _xent_inputs(rng, M, C, ignore_index)
    dl = rng.standard_normal(M).astype(np.float32)
    refs, bounds = _xent_refs(x, lab, dl.astype(np.float64), smoothing, ignore_index, chunk)
    return MultiCase(f"cross-entropy eps={smoothing}", {"x": x, "labels": lab, "dloss": dl},
                     refs, bounds)


def _xent_inputs(rng, M, C, ignore_index):
    x = (rng.standard_normal((M, C)) * 3).astype(np.float32)
    lab = rng.integers(0, C, M).astype(np.int32)
    lab[::5] = ignore_index
    return x, lab


def _xent_refs(x, lab, dl, smoothing, ignore_index, chunk):
    """Per-row loss, lse and dx (for the rows' dLoss dl) in float64, with their bounds."""
    M, C = x.shape
    X = x.astype(np.float64)
    m = X.max(1, keepdims=True)
    lse = (m + np.log(np.exp(X - m).sum(1, keepdims=True)))[:, 0]
    keep = lab != ignore_index
    xl = X[np.arange(M), np.where(keep, lab, 0)]
    loss = np.where(keep, lse - (1 - smoothing) * xl - smoothing / C * X.sum(1), 0)
    p = np.exp(X - lse[:, None])
    hot = np.zeros_like(X)
    hot[np.arange(M), np.where(keep, lab, 0)] = 1 - smoothing
    dx = np.where(keep[:, None], (p - hot - smoothing / C) * dl[:, None], 0)
    # the sum of exp as softmax's (C adds, a rescale of 2 roundings and an exp per chunk, the
    # exps' EXP_U): relative r to the sum, absolute r in its log; log rounds (u|log|), the
    # max add (u|lse|); the loss: 4 roundings of values up to |lse| + |x_y| + eps*sum|x|.
    chunks = math.ceil(C / chunk)
    spread = float((m - X).max())
    r = (C + chunks * (EXP_U + 2 + 2 * spread) + EXP_U + 2 * spread) * U32 * 1.01
    b_lse = r + 3 * U32 * (np.abs(lse) + np.abs(m[:, 0]))
    mag = np.abs(lse) + np.abs(xl) + smoothing / C * np.abs(X).sum(1)
    b_loss = np.where(keep, b_lse + gamma(C + 4) * mag, 0)
    # backward: exp(x - lse) relative (|x - lse| + 1) u + lse's bound + EXP_U; then the
    # subtractions and the multiply by dLoss: 4 roundings of values up to p + 1.
    rp = b_lse[:, None] + (np.abs(X - lse[:, None]) + 1 + EXP_U) * U32
    b_dx = np.where(keep[:, None], (rp * p + 4 * U32 * (p + 1)) * np.abs(dl)[:, None] * 1.01, 0)
    return {"loss": loss, "lse": lse, "dx": dx}, {"loss": b_loss, "lse": b_lse, "dx": b_dx}


def _xent_weighted_refs(x, lab, dl, smoothing, ignore_index, chunk, cw):
    """As _xent_refs for the weighted kernels (class weights cw with smoothing, torch's
    definition: the smoothing term weights each class)."""
    refs, b = _xent_refs(x, lab, dl, 0.0, ignore_index, chunk)  # lse and its bound
    M, C = x.shape
    X, lse, b_lse, eps = x.astype(np.float64), refs["lse"], b["lse"], smoothing
    keep = lab != ignore_index
    w = cw.astype(np.float64)
    y = np.where(keep, lab, 0)
    wy, ws, xl = (1 - eps) * w[y], w.sum(), X[np.arange(M), y]
    loss = np.where(keep, wy * (lse - xl) + eps / C * (ws * lse - X @ w), 0)
    # the weighted sum: C products and adds, + an add per chunk; WSum rounded once, the
    # constants (1 - eps, eps / C) once each, then at most 8 more roundings of values up
    # to mag; lse's error enters through both terms
    mag = np.abs(wy) * (np.abs(lse) + np.abs(xl)) + eps / C * (
        abs(ws) * np.abs(lse) + np.abs(X) @ np.abs(w))
    b_loss = np.where(keep, (np.abs(wy) + eps / C * abs(ws)) * b_lse
                      + gamma(C + math.ceil(C / chunk) + 8) * mag, 0)
    p = np.exp(X - lse[:, None])
    hot = np.zeros_like(X)
    hot[np.arange(M), y] = wy
    a = wy + eps / C * ws  # p's factor
    dx = np.where(keep[:, None], (p * a[:, None] - hot - eps / C * w) * dl[:, None], 0)
    # p relative rp (as _xent_refs); a, the products, the subtractions and the multiply by
    # dLoss: 8 roundings of values up to p|a| + |hot| + eps/C |w|
    rp = b_lse[:, None] + (np.abs(X - lse[:, None]) + 1 + EXP_U) * U32
    pa = p * np.abs(a)[:, None]
    b_dx = np.where(keep[:, None], (rp * pa + 8 * U32 * (pa + np.abs(hot) + eps / C * np.abs(
        w))) * np.abs(dl)[:, None] * 1.01, 0)
    return {"loss": loss, "lse": lse, "dx": dx}, {"loss": b_loss, "lse": b_lse, "dx": b_dx}


def xent_reduced_case(rng, M, C, reduction, smoothing=0.0, weighted=False,
                      ignore_index=-100) -> MultiCase:
    """tilepy.kernels.xent_api's loss and dx against torch's definition in float64: rows
    weighted by their class's weight (or 1), 0 when ignored; 'mean' divides by the
    weights' sum. The float64 sums (M adds) and the rounding to float32 add gamma_M(2^-53)
    and u to the per-row bounds carried through the same weights. With weights and
    smoothing both, the rows' losses and gradients carry the weights themselves
    (_xent_weighted_refs) and 'mean' still divides by the target classes' weights."""
    x, lab = _xent_inputs(rng, M, C, ignore_index)
    cw = rng.uniform(0.5, 2, C).astype(np.float32) if weighted else None
    keep = lab != ignore_index
    w = np.where(keep, 1.0 if cw is None else cw.astype(np.float64)[np.where(keep, lab, 0)], 0)
    dloss = rng.standard_normal(M if reduction == "none" else ()).astype(np.float32)
    if weighted and smoothing != 0.0:  # weighted rows: dLoss dloss (/ the weights' sum)
        scale = np.where(keep, 1 / w.sum() if reduction == "mean" else 1.0, 0.0)
        refs, b = _xent_weighted_refs(x, lab, dloss * scale, smoothing, ignore_index, 256,
                                      cw)
        terms, b_terms = refs["loss"], b["loss"]
    else:
        scale = w / w.sum() if reduction == "mean" else w
        refs, b = _xent_refs(x, lab, dloss * scale, smoothing, ignore_index, 256)
        terms, b_terms = w * refs["loss"], w * b["loss"]
    g64 = gamma(M, 2.0 ** -53)
    if reduction == "none":
        loss, b_loss = terms, b_terms + U32 * np.abs(terms)
    else:
        div = w.sum() if reduction == "mean" else 1.0
        loss = terms.sum() / div
        b_loss = ((b_terms.sum() + 2 * g64 * np.abs(terms).sum()) / div + U32 * abs(loss)) * 1.01
    # each row's dLoss is rounded to float32 once (u relative), as dx is then
    b_dx = b["dx"] * 1.01 + U32 * np.abs(refs["dx"]) * 1.01
    return MultiCase(f"cross-entropy {reduction} eps={smoothing}{' weighted' * weighted}",
                     {"x": x, "labels": lab, "dloss": dloss, "weight": cw},
                     {"loss": loss, "dx": refs["dx"]}, {"loss": b_loss, "dx": b_dx})
