"""Back-to-back contractions: an output `sum(p(i, l) * w2[l, j] for l)` whose operand p is
an element-wise expression of another contraction `sum(x[i, e] * w1[e, l] for e)` (an MLP
block, gemm + bias + GELU + gemm, after graph fusion). Per block of rows and chunk of l,
the inner gemm runs into a fragment, p is computed from it into a shared tile (0 past the
end of l, as a copy past K reads) and `T.gemm` adds its product with w2's chunk: the
(rows x l) intermediate never goes through global memory. Both folds keep the contract's
order (e ascending per element, l ascending, in each sum's accumulator dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.frontend import exprs
from tilepy.ir.expr import Call, Const, Expr, Load, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Fill, For, ForKind, Gemm
from tilepy.ir.types import int32
from tilepy.tileop.body import OpBody, Red, free_indices
from tilepy.tileop.contract import Dim, _unwrap_acc, loads_of, reds_of
from tilepy.tileop.implicit import ceildiv

_ZERO, _ONE = Const(0, int32), Const(1, int32)


@dataclass(frozen=True)
class BackToBack:
    outer: Red  # sum(p * w2[l, j] for l)
    inner: Red  # sum(x[i, e] * w1[e, l] for e), read by p
    p: Expr  # over (i, l): the inner placeholder and tile loads
    w2: Load
    x: Load
    w1: Load


def match_b2b(body: OpBody, e: Expr, names: list[str]) -> BackToBack | None:
    """e's contraction (over l) when its operand over (i, l) is an element-wise expression
    of one inner contraction over (i, l); operands in the plain orientation."""
    reds = reds_of(body, e)
    if len(names) != 2 or len(reds) != 2:
        return None
    i, j = names
    inner, outer = reds if _uses(reds[1].body, reds[0].out.name) else reversed(reds)
    if not (_is_sum_of_product(inner) and _is_sum_of_product(outer)) or \
            _uses(e, inner.out.name):
        return None
    l_, e_ = outer.var.name, inner.var.name
    x, w1 = (_unwrap_acc(f, inner.out.dtype) for f in inner.body.args)
    if not (_at(x, i, e_) and _at(w1, e_, l_)):
        return None
    f, g = (_unwrap_acc(a, outer.out.dtype) for a in outer.body.args)
    if _at(f, l_, j):
        f, g = g, f
    if not _at(g, l_, j) or f is None or not _uses(f, inner.out.name):
        return None
    if not _elementwise(f, inner.out.name) or \
            not set(free_indices(body, f)) <= {i, l_}:
        return None
    if not all(isinstance(x_, Var) and x_.name in (i, l_) or isinstance(x_, Const)
               for ld in loads_of(f) for x_ in ld.indices):
        return None
    return BackToBack(outer, inner, f, g, x, w1)


def _is_sum_of_product(r: Red) -> bool:
    return r.kind.value == "sum" and isinstance(r.body, Call) and r.body.op is Op.MUL


def _at(x, a: str, b: str) -> bool:
    """A load at exactly (a, b)."""
    return isinstance(x, Load) and [getattr(v, "name", None) for v in x.indices] == [a, b]


def _uses(e: Expr, name: str) -> bool:
    if isinstance(e, Var):
        return e.name == name
    if isinstance(e, Load):
        return any(_uses(x, name) for x in e.indices)
    return isinstance(e, Call) and any(_uses(a, name) for a in e.args)


def _elementwise(e: Expr, placeholder: str) -> bool:
    """Calls of loads, constants and the inner placeholder (no index used as a value)."""
    if isinstance(e, Var):
        return e.name == placeholder
    if isinstance(e, Call):
        return all(_elementwise(a, placeholder) for a in e.args)
    return isinstance(e, (Load, Const))


class BackToBackLaunch:
    """The statements of a back-to-back contraction: a mixin of lower.py's launch builder
    (alloc, operand, red_frags, stmts)."""

    def back_to_back(self, m: BackToBack, ctx: dict, names: list[str]) -> None:
        i, j = names
        outer, inner = m.outer, m.inner
        bh, be = self.low.tile(outer.var.name), self.low.tile(inner.var.name)
        ko = Var(self.low.fresh("ko"), int32)
        hctx = {**ctx, outer.var.name: Dim(exprs.call(Op.MUL, [ko, bh], outer.loc), bh,
                                           outer.extent)}
        acc = self.alloc("acc", (ctx[i].tile, ctx[j].tile), outer.out.dtype)
        self.stmts.append(Fill(full_region(acc), Const(0, acc.dtype), loc=outer.loc))
        steps: list = []
        h_acc = self.alloc("h_acc", (ctx[i].tile, bh), inner.out.dtype)
        steps.append(Fill(full_region(h_acc), Const(0, h_acc.dtype), loc=inner.loc))
        ke = Var(self.low.fresh("ke"), int32)
        ectx = {**hctx, inner.var.name: Dim(exprs.call(Op.MUL, [ke, be], inner.loc), be,
                                            inner.extent)}
        ksteps: list = []
        x_s = self.operand(m.x, [i, inner.var.name], ectx, ksteps, inner)
        w1_s = self.operand(m.w1, [inner.var.name, outer.var.name], ectx, ksteps, inner)
        ksteps.append(Gemm(full_region(x_s), full_region(w1_s), full_region(h_acc),
                           loc=inner.loc))
        steps.append(For(ke, _ZERO, ceildiv(inner.extent, be), _ONE, ForKind.PIPELINED,
                         tuple(ksteps), num_stages=2, loc=inner.loc))
        self.red_frags[inner.out.name] = (h_acc, [i, outer.var.name])
        h_s = self.operand(m.p, [i, outer.var.name], hctx, steps, outer)
        w2_s = self.operand(m.w2, [outer.var.name, j], hctx, steps, outer)
        steps.append(Gemm(full_region(h_s), full_region(w2_s), full_region(acc),
                          loc=outer.loc))
        self.stmts.append(For(ko, _ZERO, ceildiv(outer.extent, bh), _ONE, ForKind.SERIAL,
                              tuple(steps), loc=outer.loc))
        self.red_frags[outer.out.name] = (acc, [i, j])
