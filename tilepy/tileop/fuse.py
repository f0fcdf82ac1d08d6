"""Fusing two tile ops' index expressions into one: a consumer's read of the producer's
output becomes the producer's expression, rounded to the producer's output dtype (the
value the unfused graph stored and read back). Works on OpBodies; builds no kernel.
"""

from __future__ import annotations

from tilepy.frontend import exprs
from tilepy.ir.expr import Buffer, Call, Expr, Load, Var
from tilepy.tileop.body import OpBody
from tilepy.tileop.lower import reds_of
from tilepy.tileop.spec import Signature


def is_elementwise(body: OpBody) -> bool:
    """One output and no reductions: a map over the output's indices."""
    return len(body.outs) == 1 and not reds_of(body, body.outs[0])


def loads_identity(body: OpBody, k: int) -> bool:
    """Every read of parameter k is at the output's own indices, in order."""
    name = body.sig.params[k].name
    want = tuple(list(body.index.values())[:len(body.sig.outputs[0].shape)])
    loads = [ld for ld in _loads(body.outs[0]) if ld.buffer.name == name]
    return bool(loads) and all(ld.indices == want for ld in loads)


def _loads(e: Expr):
    if isinstance(e, Load):
        yield e
    elif isinstance(e, Call):
        for a in e.args:
            yield from _loads(a)


def substitute(e: Expr, var_map: dict, buf_map: dict, on_load=None) -> Expr:
    """e with variables renamed (`var_map`: name -> Expr), buffers replaced (`buf_map`:
    name -> Buffer) and, when `on_load(load)` returns an expression, loads replaced."""
    if isinstance(e, Var):
        return var_map.get(e.name, e)
    if isinstance(e, Load):
        if on_load is not None:
            got = on_load(e)
            if got is not None:
                return got
        idx = tuple(substitute(x, var_map, buf_map) for x in e.indices)
        return Load(buf_map.get(e.buffer.name, e.buffer), idx)
    if isinstance(e, Call):
        return Call(e.op, tuple(substitute(a, var_map, buf_map, on_load) for a in e.args),
                    e.dtype, e.loc)
    return e


def fuse_bodies(prod: OpBody, cons: OpBody, k: int) -> OpBody:
    """The op computing cons with its parameter k replaced by prod's (only) output."""
    v = cons.sig.params[k]
    pout = prod.sig.outputs[0]
    taken = set(prod.sig.sizes) | {b.name for b in prod.sig.params}
    var_map: dict[str, Expr] = {}
    for want, have in zip(v.shape, pout.shape):  # the consumer's sizes of v are prod's
        if isinstance(want, Var):
            var_map[want.name] = have
    sizes = dict(prod.sig.sizes)
    for name, s in cons.sig.sizes.items():
        if name not in var_map:
            new = _fresh(name, taken)
            var_map[name] = Var(new, s.dtype)
            sizes[new] = var_map[name]
    for cname, pname in zip(cons.index, prod.index):  # index names, dim by dim
        var_map[cname] = prod.index[pname]
    buf_map: dict[str, Buffer] = {}
    params = list(prod.sig.params)
    locs = list(prod.sig.param_locs)
    for n, b in enumerate(cons.sig.params):
        if n == k:
            continue
        nb = Buffer(_fresh(b.name, taken), tuple(substitute(s, var_map, {}) for s in b.shape),
                    b.dtype)
        buf_map[b.name] = nb
        params.append(nb)
        locs.append(cons.sig.param_locs[n])
    stored = exprs.cast(prod.outs[0], pout.dtype, cons.out_locs[0])

    def read_prod(ld: Load):
        return stored if ld.buffer.name == v.name else None

    out_e = substitute(cons.outs[0], var_map, buf_map, read_prod)
    cout = cons.sig.outputs[0]
    out = Buffer("out", pout.shape, cout.dtype)
    sig = Signature(params, [out], sizes, locs, list(cons.sig.output_locs))
    return OpBody(f"{prod.name}_{cons.name}", sig, [out_e], list(prod.reds), prod.index,
                  dict(prod.extents), list(cons.out_locs))


def _fresh(name: str, taken: set) -> str:
    new, n = name, 0
    while new in taken:
        n += 1
        new = f"{name}_{n}"
    taken.add(new)
    return new
