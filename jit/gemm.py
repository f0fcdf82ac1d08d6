"""Emitter for `T.gemm`: C += op(A) @ op(B) in the contract's order: per C element, k
ascending from C's current value (0 if clear_accum), the product in C's dtype then the add,
one rounding each, through the op table (no FMA: exact kernels get no fast-math flag).
Static float32/float64 local tiles use a register-blocked micro-kernel, others i-k-j loops;
both vectorise along j without changing any element's order. Fast mode's BLAS: fast.py.
"""

from __future__ import annotations

from tilepy.ir.errors import LoweringError
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Gemm
from tilepy.jit.regions import Side, bind_side, open_loops
from tilepy.jit.scalars import Emitter, np_name
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


def emit_gemm(em: Emitter, w: Writer, s: Gemm, direct: dict | None = None) -> None:
    """`direct`: tile name -> (array, row offset, column offset) the tile's elements are
    read from instead (jit/direct.py: the global it was copied from, or the tile itself)."""
    a, b, c = (bind_side(em, w, r, n) for r, n in ((s.a, "a"), (s.b, "b"), (s.c, "c")))
    (ar, ac), (br, bc), (cr, cc) = (_mat_dims(x, n, em) for x, n in
                                    ((a, "A"), (b, "B"), (c, "C")))
    m_dim, k_dim = (ac, ar) if s.transpose_a else (ar, ac)
    kb_dim, n_dim = (bc, br) if s.transpose_b else (br, bc)
    dt = s.c.dtype
    g = _Operands(em, s, lambda i, k: a.index([i, k], [m_dim, k_dim]),
                  lambda k, j: b.index([k, j], [kb_dim, n_dim]),
                  lambda i, j: c.index([i, j], [cr, cc]), direct or {})
    M, N, K = c.exts[cr], c.exts[cc], a.exts[k_dim]
    if em.fast:
        from tilepy.jit.fast import emit_dot

        if emit_dot(em, w, s):  # clear_accum included (BLAS's beta = 0)
            return
    if s.clear_accum:
        i, j = em.names.temp("i"), em.names.temp("j")
        w.line(f"for {i} in range({M}):")
        w.line(f"    for {j} in range({N}):")
        for line in em.store(s.c.buffer, g.c(i, j), em.zero(dt)):
            w.line("        " + line)
    blocked = all(x.isdigit() for x in (M, N, K)) and dt.name in ("float32", "float64") \
        and all(em.ref(r.buffer).kind == "array" for r in (s.a, s.b, s.c))
    if not blocked:
        _ikj(em, w, g, ("0", M), ("0", N), K)
        return
    mr, nr = MR, NR[dt.name]
    if s.transpose_b:
        _transpose_b(em, w, g, N, K)
    m0, n0 = int(M) - int(M) % mr, int(N) - int(N) % nr
    if m0 and n0:
        _micro(em, w, g, m0, n0, int(K), mr, nr)
    if n0 < int(N):
        _ikj(em, w, g, ("0", str(m0)), (str(n0), N), K)
    if m0 < int(M):
        _ikj(em, w, g, (str(m0), M), ("0", N), K)


MR = 4  # register block: MR rows x NR columns of C held in scalar accumulators
NR = {"float32": 16, "float64": 8}
REGISTER_BLOCKS = "register blocks"  # em.notes: see Lowered.slp (jit/lower.py)


class _Operands:
    """Source strings of A[i, k], B[k, j] (converted to C's dtype) and C's indices."""

    def __init__(self, em: Emitter, s: Gemm, ai, bi, ci, direct: dict):
        self.em, self.s, self.ai, self.bi, self.c = em, s, ai, bi, ci
        self.dt = s.c.dtype
        self.b_scratch = None  # a k-major copy of a transposed B tile (_transpose_b)
        self.direct = direct

    def _load(self, buf, idx: list[str]) -> str:
        if buf.name not in self.direct:
            return self.em.load(buf, idx)
        arr, r0, c0 = self.direct[buf.name]
        return f"{arr}[np.uint64({r0} + {idx[0]}), np.uint64({c0} + {idx[1]})]"

    def a(self, i: str, k: str) -> str:
        x = self._load(self.s.a.buffer, self.ai(i, k))
        return self.em.cast(x, self.s.a.dtype, self.dt)

    def b(self, k: str, j: str) -> str:
        if self.b_scratch:
            return f"{self.b_scratch}[{k}, {j}]"
        x = self._load(self.s.b.buffer, self.bi(k, j))
        return self.em.cast(x, self.s.b.dtype, self.dt)

    def step(self, c: str, a: str, b: str) -> str:
        """c + a * b: the product in C's dtype, then the add (two roundings, no FMA)."""
        return combine(self.em, Op.ADD, c, combine(self.em, Op.MUL, a, b, self.dt), self.dt)


def _transpose_b(em: Emitter, w: Writer, g: _Operands, N: str, K: str) -> None:
    """A transposed B tile read along k is N strided loads per k step; copy it once,
    k-major and already in C's dtype, so the loops read rows. The values are the same
    (the copy holds exactly what the loads gave), so are the products and sums."""
    bt, j, k = em.names.temp("bt"), em.names.temp("j"), em.names.temp("k")
    w.line(f"{bt} = np.empty(({K}, {N}), {np_name(g.dt)})  # B transposed, k-major")
    w.line(f"for {j} in range({N}):")
    w.line(f"    for {k} in range({K}):")
    w.line(f"        {bt}[{k}, {j}] = {g.b(k, j)}")
    g.b_scratch = bt


def _ikj(em: Emitter, w: Writer, g: _Operands, rows, cols, K: str) -> None:
    """The plain form: i, k, j loops (j vectorises; each element keeps k ascending)."""
    depth = w.depth
    i, k = open_loops(em, w, [rows[0], "0"], [rows[1], K])
    av = em.names.temp("a")
    w.line(f"{av} = {g.a(i, k)}")
    (j,) = open_loops(em, w, [cols[0]], [cols[1]])
    cidx = g.c(i, j)
    for line in em.store(g.s.c.buffer, cidx, g.step(em.load(g.s.c.buffer, cidx), av,
                                                    g.b(k, j))):
        w.line(line)
    w.depth = depth


def _micro(em: Emitter, w: Writer, g: _Operands, m0: int, n0: int, K: int, mr: int,
           nr: int) -> None:
    """Register-blocked: an mr x nr block of C in scalar accumulators over all of k
    (LLVM's SLP vectoriser packs them), then stored back. Same order per element."""
    em.notes.add(REGISTER_BLOCKS)
    i0, j0, k = em.names.temp("i"), em.names.temp("j"), em.names.temp("k")
    w.line(f"for {i0} in range(0, {m0}, {mr}):  # {mr}x{nr} register blocks")
    w.line(f"    for {j0} in range(0, {n0}, {nr}):")
    w.depth += 2
    rows = [f"{i0} + {r}" if r else i0 for r in range(mr)]
    cols = [f"{j0} + {q}" if q else j0 for q in range(nr)]
    acc = [[f"_c{r}_{q}" for q in range(nr)] for r in range(mr)]
    for r in range(mr):
        w.line("; ".join(f"{acc[r][q]} = {em.load(g.s.c.buffer, g.c(rows[r], cols[q]))}"
                         for q in range(nr)))
    w.line(f"for {k} in range({K}):")
    w.depth += 1
    w.line("; ".join(f"_a{r} = {g.a(rows[r], k)}" for r in range(mr)))
    w.line("; ".join(f"_b{q} = {g.b(k, cols[q])}" for q in range(nr)))
    for r in range(mr):
        w.line("; ".join(f"{acc[r][q]} = {g.step(acc[r][q], f'_a{r}', f'_b{q}')}"
                         for q in range(nr)))
    w.depth -= 1
    for r in range(mr):
        for q in range(nr):
            for line in em.store(g.s.c.buffer, g.c(rows[r], cols[q]), acc[r][q]):
                w.line(line)
    w.depth -= 2
