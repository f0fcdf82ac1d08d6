"""Emitter for `T.gemm`: C += op(A) @ op(B) in the contract's order.

For each C element: k ascending from C's current value (0 if clear_accum), the product
computed in C's dtype then added, one rounding per op, no FMA (no fastmath flag ever
reaches this code). Loops run i, k, j so the j loop vectorises without changing any
element's order. Products and sums are emitted through the op table.
"""

from __future__ import annotations

from tilepy.errors import LoweringError
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Gemm
from tilepy.jit.regions import Side, bind_side, open_loops
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer
from tilepy.jit.tiles import combine


def _mat_dims(side: Side, what: str, em: Emitter) -> list[int]:
    """The two buffer dims a gemm operand's tile spans (leading dims must be unit)."""
    nd = len(side.starts)
    if nd < 2:
        raise LoweringError(f"T.gemm: {what} must be a 2-d tile; got {nd} dims", loc=em.loc)
    lead = [d for d in side.dims if d < nd - 2]
    if lead:
        raise LoweringError(f"T.gemm: {what} has more than two non-unit dims", loc=em.loc,
                            hint="pass 2-d tiles to T.gemm")
    return [nd - 2, nd - 1]


def emit_gemm(em: Emitter, w: Writer, s: Gemm) -> None:
    a, b, c = (bind_side(em, w, r, n) for r, n in ((s.a, "a"), (s.b, "b"), (s.c, "c")))
    (ar, ac), (br, bc), (cr, cc) = (_mat_dims(x, n, em) for x, n in
                                    ((a, "A"), (b, "B"), (c, "C")))
    m_dim, k_dim = (ac, ar) if s.transpose_a else (ar, ac)
    kb_dim, n_dim = (bc, br) if s.transpose_b else (br, bc)
    M, N, K = c.exts[cr], c.exts[cc], a.exts[k_dim]
    dt = s.c.dtype
    if s.clear_accum:
        i, j = em.names.temp("i"), em.names.temp("j")
        w.line(f"for {i} in range({M}):")
        w.line(f"    for {j} in range({N}):")
        for line in em.store(s.c.buffer, c.index([i, j], [cr, cc]), em.zero(dt)):
            w.line("        " + line)
    depth = w.depth
    i, k = open_loops(em, w, ["0", "0"], [M, K])
    av = em.names.temp("a")
    w.line(f"{av} = {em.cast(em.load(s.a.buffer, a.index([i, k], [m_dim, k_dim])), s.a.dtype, dt)}")
    (j,) = open_loops(em, w, ["0"], [N])
    bv = em.cast(em.load(s.b.buffer, b.index([k, j], [kb_dim, n_dim])), s.b.dtype, dt)
    cidx = c.index([i, j], [cr, cc])
    total = combine(em, Op.ADD, em.load(s.c.buffer, cidx), combine(em, Op.MUL, av, bv, dt), dt)
    for line in em.store(s.c.buffer, cidx, total):
        w.line(line)
    w.depth = depth
