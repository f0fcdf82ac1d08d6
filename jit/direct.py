"""Exact mode's direct gemm operand: in a k loop whose body copies global tiles into local
tiles only for one `T.gemm` to read them, the gemm reads A's tile where it lies in global
memory when the tile is wholly inside its array; the copy runs only for a tile that
reaches past an edge (zero-filled). The gemm then sees the same values, forms the same
products and sums them in the same k order: the bits cannot change. B keeps its copy: the
register block reads a row of B's tile per k step, and rows of a global lie a leading
dimension apart (L1 set conflicts at power-of-two widths; measured slower, perf-log).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.ir.expr import Const, Load
from tilepy.ir.stmt import Copy, For, Gemm, walk
from tilepy.ir.tileops import display
from tilepy.ir.types import Scope, compute_dtype
from tilepy.jit.gemm import emit_gemm
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer


@dataclass(frozen=True)
class DirectLoop:
    """A k loop of copies then one gemm; `feeds` are the copies (by id) whose local tile
    (written by nothing else in the loop) the gemm may read from the global source."""

    loop: For
    gemm: Gemm
    feeds: frozenset[int]


def plan(em: Emitter, body) -> dict[int, DirectLoop]:
    """The launch body's k loops (by id) whose gemm may read global tiles directly: each
    fed tile is read by that gemm alone anywhere in the block (after the loop it may hold
    another k step's tile, or none)."""
    out = {}
    for s in walk(body):
        if isinstance(s, For):
            d = _match(em, s)
            if d is not None and not _read_elsewhere(body, d):
                out[id(s)] = d
    return out


def _match(em: Emitter, s: For) -> DirectLoop | None:
    if len(s.body) < 2 or not isinstance(s.body[-1], Gemm):
        return None
    g: Gemm = s.body[-1]
    if not all(isinstance(c, Copy) for c in s.body[:-1]):
        return None
    writers = [c.dst.buffer.root.name for c in s.body[:-1]]
    feeds = frozenset(id(c) for c in s.body[:-1]
                      if _feeds(em, c, g) and writers.count(c.dst.buffer.name) == 1)
    return DirectLoop(s, g, feeds) if feeds else None


def _feeds(em: Emitter, c: Copy, g: Gemm) -> bool:
    """c copies a whole in-dtype 2-d global tile into the whole local tile that g reads
    as A, not transposed (and g's operand is that whole tile)."""
    src, dst = c.src, c.dst
    if dst != g.a or g.transpose_a or dst.buffer.name in (g.b.buffer.name, g.c.buffer.name):
        return False
    shape = dst.buffer.static_shape()
    if (dst.buffer.scope in (Scope.GLOBAL, Scope.VAR) or dst.buffer.data is not None
            or dst.buffer.ndim != 2 or shape is None or dst.static_extents() != shape
            or not all(isinstance(x, Const) and int(x.value) == 0 for x in dst.starts)):
        return False
    if src.buffer.data is not None:  # a view, declared later in the body: not known yet
        return False
    r = em.ref(src.buffer)
    return (r.kind == "global" and r.codec is None
            and src.buffer.ndim == 2 and src.dtype == dst.dtype
            and compute_dtype(src.dtype).name == src.dtype.name and src.static_extents() == shape
            and not any(_loads(e) for e in src.starts))


def _loads(e) -> bool:
    return isinstance(e, Load) or any(_loads(a) for a in getattr(e, "args", ()))


def _read_elsewhere(body, d: DirectLoop) -> bool:
    tiles = {c.dst.buffer.name for c in d.loop.body if id(c) in d.feeds}
    return any(b.root.name in tiles for s in walk(body) if s is not d.gemm
               for b in s.reads())


def emit_body(em: Emitter, w: Writer, d: DirectLoop, stmt) -> None:
    """The loop body: each fed copy becomes `if inside: read in place, else: copy`, then
    the gemm reads whichever array each operand's tile lies in; `stmt` emits the rest."""
    tiles = {}
    for s in d.loop.body:
        if s is d.gemm:
            w.comment(display(s) + ": operands read where they lie (jit/direct.py)", s.loc)
            emit_gemm(em, w, s, direct=tiles)
        elif id(s) in d.feeds:
            tiles[s.dst.buffer.name] = _feed(em, w, s, stmt)
        else:
            stmt(em, w, s)


def _feed(em: Emitter, w: Writer, c: Copy, stmt) -> tuple[str, str, str]:
    """(array, row offset, column offset) the gemm reads the copy's tile from."""
    g, t = em.ref(c.src.buffer).name, em.ref(c.dst.buffer).name
    rows, cols = c.dst.buffer.static_shape()
    arr, r0, c0 = (em.names.temp(h) for h in ("src", "r", "c"))
    s0, s1 = (em.names.temp("st") for _ in range(2))
    w.line(f"{s0} = np.int64({em.expr(c.src.starts[0])})")
    w.line(f"{s1} = np.int64({em.expr(c.src.starts[1])})")
    w.line(f"if 0 <= {s0} <= {g}.shape[0] - {rows} and 0 <= {s1} <= {g}.shape[1] - {cols}:")
    w.line(f"    {arr}, {r0}, {c0} = {g}, {s0}, {s1}  # the tile lies inside {g}: no copy")
    w.line("else:")
    with w.indent():
        stmt(em, w, c)
        w.line(f"{arr}, {r0}, {c0} = {t}, np.int64(0), np.int64(0)")
    return arr, r0, c0

