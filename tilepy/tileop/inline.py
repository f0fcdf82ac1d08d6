"""Inlining a producer tile op into a consumer: every read of the producer's output becomes
the producer's expression at the read's indices, rounded to the producer's output dtype
(what the unfused graph stored and read back), its reductions copied with fresh names. Then
parameters bound to the same graph value are merged and equal reductions computed once.
Works on OpBodies; builds no kernel.
"""

from __future__ import annotations

from tilepy.frontend import exprs
from tilepy.ir.expr import Buffer, Call, Expr, Load, Var
from tilepy.tileop.body import OpBody, Red
from tilepy.tileop.fuse import _fresh, substitute
from tilepy.tileop.spec import Signature


def inline_body(prod: OpBody, cons: OpBody, k: int) -> OpBody:
    """cons with its parameter k (prod's only output) replaced by prod's expression.
    Parameters: cons's without k, then prod's (renamed where names clash)."""
    v = cons.sig.params[k]
    taken = {*cons.sig.sizes, *(b.name for b in cons.sig.params), *cons.extents,
             *(r.out.name for r in cons.reds), *cons.index}
    size_map: dict[str, Expr] = {}
    sizes = dict(cons.sig.sizes)
    for have, want in zip(prod.sig.outputs[0].shape, v.shape):  # prod's sizes are cons's
        if isinstance(have, Var):
            size_map[have.name] = want
    for name, s in prod.sig.sizes.items():
        if name not in size_map:
            new = _fresh(name, taken)
            size_map[name] = sizes[new] = Var(new, s.dtype)
    buf_map: dict[str, Buffer] = {}
    params = [b for n, b in enumerate(cons.sig.params) if n != k]
    locs = [x for n, x in enumerate(cons.sig.param_locs) if n != k]
    for b, loc in zip(prod.sig.params, prod.sig.param_locs):
        nb = Buffer(_fresh(b.name, taken), tuple(substitute(s, size_map, {}) for s in b.shape),
                    b.dtype)
        buf_map[b.name] = nb
        params.append(nb)
        locs.append(loc)
    site = _Sites(prod, size_map, buf_map, taken)

    def read(ld: Load):
        return site.expr(ld.indices) if ld.buffer.name == v.name else None

    reds = [Red(r.out, r.kind, r.var, r.extent, substitute(r.body, {}, {}, read), r.loc,
                r.name, r.parts, r.part_extents) for r in cons.reds]
    outs = [substitute(e, {}, {}, read) for e in cons.outs]
    extents = {**cons.extents, **site.extents}
    sig = Signature(params, list(cons.sig.outputs), sizes, locs, list(cons.sig.output_locs))
    return OpBody(f"{prod.name}_{cons.name}", sig, outs, site.reds + reds, cons.index,
                  extents, list(cons.out_locs))


class _Sites:
    """prod's expression at each distinct index tuple it is read at (its reductions copied
    once per tuple, with fresh variable and placeholder names)."""

    def __init__(self, prod: OpBody, size_map: dict, buf_map: dict, taken: set):
        self.prod, self.size_map, self.buf_map, self.taken = prod, size_map, buf_map, taken
        self.reds: list[Red] = []
        self.extents: dict[str, Expr] = {}
        self.done: dict[tuple, Expr] = {}

    def expr(self, indices: tuple) -> Expr:
        if indices in self.done:
            return self.done[indices]
        p = self.prod
        var_map = dict(self.size_map)
        for name, ix in zip(p.index, indices):
            var_map[p.index[name].name] = ix
        for r in p.reds:  # fresh names for each reduction's variable and placeholder
            var_map[r.var.name] = Var(_fresh(r.var.name, self.taken), r.var.dtype)
            var_map[r.out.name] = Var(_fresh(r.out.name, self.taken), r.out.dtype)
        for r in p.reds:
            nv = var_map[r.var.name]
            ext = substitute(r.extent, var_map, self.buf_map)
            self.extents[nv.name] = ext
            self.reds.append(Red(var_map[r.out.name], r.kind, nv, ext,
                                 substitute(r.body, var_map, self.buf_map), r.loc,
                                 r.name, r.parts, r.part_extents))
        e = substitute(p.outs[0], var_map, self.buf_map)
        out = exprs.cast(e, p.sig.outputs[0].dtype, p.out_locs[0])
        self.done[indices] = out
        return out


def merge_params(body: OpBody, inputs: list) -> tuple[OpBody, list]:
    """Parameters bound to the same graph value become one (the first); the sizes only the
    dropped one named become the kept one's."""
    keep: list[int] = []
    buf_map: dict[str, Buffer] = {}
    size_map: dict[str, Expr] = {}
    sig = body.sig
    for n, v in enumerate(inputs):
        first = next(m for m in keep + [n] if inputs[m] is v)
        if first == n:
            keep.append(n)
            continue
        buf_map[sig.params[n].name] = sig.params[first]
        for have, want in zip(sig.params[n].shape, sig.params[first].shape):
            if isinstance(have, Var) and have != want:
                size_map[have.name] = want
    if len(keep) == len(inputs):
        return body, inputs
    params = [sig.params[n] for n in keep]
    params = [Buffer(b.name, tuple(substitute(x, size_map, {}) for x in b.shape), b.dtype)
              for b in params]
    buf_map.update({b.name: b for b in params})
    sizes = {k: x for k, x in sig.sizes.items() if k not in size_map}
    sig2 = Signature(params, sig.outputs, sizes, [sig.param_locs[n] for n in keep],
                     sig.output_locs)
    reds = [Red(r.out, r.kind, r.var, substitute(r.extent, size_map, {}),
                substitute(r.body, size_map, buf_map), r.loc, r.name, r.parts,
                tuple(substitute(x, size_map, {}) for x in r.part_extents))
            for r in body.reds]
    outs = [substitute(e, size_map, buf_map) for e in body.outs]
    out = _body_with(body, sig2, outs, reds)
    out.extents = {k: substitute(x, size_map, {}) for k, x in body.extents.items()}
    return out, [inputs[n] for n in keep]


def dedupe_reductions(body: OpBody) -> OpBody:
    """Reductions computing the same fold (same kind, range and body up to the name of
    their variable) become one; later ones read the first one's placeholder."""
    seen: dict = {}
    rename: dict[str, Expr] = {}
    reds: list[Red] = []
    for r in body.reds:
        b = substitute(r.body, rename, {})
        canon = substitute(b, {r.var.name: Var("__k", r.var.dtype)}, {})
        key = (r.kind, r.extent, r.out.dtype, canon)
        if key in seen:
            rename[r.out.name] = seen[key]
            continue
        seen[key] = r.out
        reds.append(_red_with(r, b))
    if len(reds) == len(body.reds):
        return body
    outs = [substitute(e, rename, {}) for e in body.outs]
    extents = {n: x for n, x in body.extents.items()
               if n in body.index or any(r.var.name == n for r in reds)}
    out = _body_with(body, body.sig, outs, reds)
    out.extents = extents
    return out


def _red_with(r: Red, b: Expr) -> Red:
    return Red(r.out, r.kind, r.var, r.extent, b, r.loc, r.name, r.parts, r.part_extents)


def _body_with(body: OpBody, sig: Signature, outs: list, reds: list) -> OpBody:
    return OpBody(body.name, sig, outs, reds, body.index, dict(body.extents),
                  list(body.out_locs))


def reads(e: Expr, name: str):
    """The loads of buffer `name` in e."""
    if isinstance(e, Load):
        if e.buffer.name == name:
            yield e
        for x in e.indices:
            yield from reads(x, name)
    elif isinstance(e, Call):
        for a in e.args:
            yield from reads(a, name)
