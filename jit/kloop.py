"""Fast mode: which k loops and launches are matrix products over global operands. A k loop
that only copies a global tile of A and one of B into local tiles and gemms them sums
op(A_k) @ op(B_k) over consecutive K slices (`match_kloop`); a launch of such blocks that
covers C is one product of the whole matrices (`match_launch`), which fast.py emits as one
BLAS call. Only proves those shapes (None when unproven) and says where operands lie.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Region, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import Alloc, Copy, Fill, For, ForKind, Gemm, Launch
from tilepy.ir.types import Scope

_FLOATS = ("float32", "float64")
_SERIAL = (ForKind.SERIAL, ForKind.PIPELINED, ForKind.UNROLLED)


@dataclass(frozen=True)
class Operand:
    """One global operand of the fused product: the copy that fed its tile each k step.

    The tile's two dims are the source buffer's last two; `kdim` / `odim` are the global
    dims along K and along M (for A) or N (for B); the K slice of step k starts at
    `koff + bk * k`, the other dim at `ostart` (the same for every k)."""

    copy: Copy
    kdim: int
    odim: int
    koff: Expr
    ostart: Expr

    @property
    def region(self) -> Region:
        return self.copy.src

    @property
    def lead(self) -> tuple[Expr, ...]:
        """Starts of the unit leading dims (the same for every k)."""
        return self.region.starts[:-2]


@dataclass(frozen=True)
class KLoop:
    """A k loop whose body only copies a global tile of A and one of B into block-local
    tiles and `T.gemm`s them into an accumulator: with reassociation allowed (fast mode),
    `C += op(A[.., K range]) @ op(B[K range, ..])` over the block's whole K range."""

    loop: For
    gemm: Gemm
    a: Operand
    b: Operand
    bk: int  # the K extent of one step's tiles


def match_kloop(s: For) -> KLoop | None:
    """The k loop `s` as a product over global operands, or None when unproven. Only
    match_launch uses it: one BLAS call per output tile over its whole K range was slower
    than per-step calls on the copied tiles at the library's 64x64 tiles (docs/perf-log.md)."""
    if (s.kind not in _SERIAL or not _is_const(s.start, 0) or not _is_const(s.step, 1)
            or len(s.body) != 3 or not isinstance(s.body[2], Gemm)
            or not all(isinstance(c, Copy) for c in s.body[:2])):
        return None
    g: Gemm = s.body[2]
    if g.clear_accum or g.c.dtype.name not in _FLOATS or _loads(s.stop):
        return None
    tiles = [r.buffer for r in (g.a, g.b, g.c)]
    if len({b.name for b in tiles}) != 3 or not all(_whole_local(r) for r in (g.a, g.b, g.c)):
        return None
    if any(r.dtype != g.c.dtype and not _narrow_into(r.dtype, g.c.dtype) for r in (g.a, g.b)):
        return None
    copies = {c.dst.buffer.name: c for c in s.body[:2]}
    ca, cb = copies.get(g.a.buffer.name), copies.get(g.b.buffer.name)
    if ca is None or cb is None or ca is cb:
        return None
    # tile dims: A is (M, K), or (K, M) transposed; B is (K, N), or (N, K) transposed
    a = _operand(ca, s.var, 0 if g.transpose_a else 1)
    b = _operand(cb, s.var, 1 if g.transpose_b else 0)
    if a is None or b is None or a[1] != b[1]:
        return None
    rows, cols = g.c.buffer.static_shape()
    if (a[0].region.static_extents()[a[0].odim] != rows
            or b[0].region.static_extents()[b[0].odim] != cols):
        return None
    return KLoop(s, g, a[0], b[0], a[1])


def _narrow_into(tile, acc) -> bool:
    """Narrow float tiles into a float32 accumulator: their values are exact in float32
    and so are their products (at most 22 significant bits), what BLAS then sums."""
    return tile.is_float and tile.bits < 32 and acc.name == "float32"


def _operand(c: Copy, k: Var, tile_kdim: int) -> tuple[Operand, int] | None:
    """A copy of a global tile into a whole local tile of its dtype, its K slice moving
    by one tile per step; (operand, K extent) or None."""
    src, dst = c.src, c.dst
    if (src.buffer.scope is not Scope.GLOBAL or src.buffer.data is not None
            or src.dtype != dst.dtype or not _whole_local(dst) or src.buffer.ndim < 2):
        return None
    ext = src.static_extents()
    nd = src.buffer.ndim
    if ext is None or any(e != 1 for e in ext[:-2]) or ext[-2:] != dst.buffer.static_shape():
        return None
    if any(_loads(e) for e in src.starts) or any(_uses(e, k) for e in src.starts[:-2]):
        return None
    kdim, odim = nd - 2 + tile_kdim, nd - 1 - tile_kdim
    bk = ext[kdim]
    if _uses(src.starts[odim], k) or _coef(src.starts[kdim], k) != bk:
        return None
    koff = _subst(src.starts[kdim], k, Const(0, k.dtype))
    return Operand(c, kdim, odim, koff, src.starts[odim]), bk


@dataclass(frozen=True)
class LaunchGemm:
    """A launch that is `C[rows, cols] = op(A) @ op(B)` for the whole grid: block id `row`
    picks rows [row * bm, +bm) of A and C, block id `col` columns [col * bn, +bn) of B
    and C, every block sums the same K range. `grid_row` / `grid_col` index s.grid."""

    launch: Launch
    kloop: KLoop
    out: Copy
    grid_row: int
    grid_col: int


def match_launch(s: Launch) -> LaunchGemm | None:
    """The launch `s` as one product of the whole matrices, or None when unproven: its
    blocks each clear an accumulator, run a `match_kloop` loop for the rows / columns
    their block ids pick, and copy it out to the same place of a global C."""
    stmts = [x for x in s.body if not isinstance(x, Alloc)]
    if (len(stmts) != 3 or not isinstance(stmts[0], Fill) or not isinstance(stmts[1], For)
            or not isinstance(stmts[2], Copy)):
        return None
    if any(x.buffer.data is not None for x in s.body if isinstance(x, Alloc)):
        return None
    fill, out = stmts[0], stmts[2]
    kl = match_kloop(stmts[1])
    if kl is None or fill.dst != kl.gemm.c or out.src != kl.gemm.c:
        return None
    if not (isinstance(fill.value, Const) and fill.value.value == 0):
        return None
    dst = out.dst
    if (dst.buffer.scope is not Scope.GLOBAL or dst.buffer.data is not None
            or dst.dtype != kl.gemm.c.dtype or dst.buffer.ndim < 2
            or dst.static_extents() is None or any(e != 1 for e in dst.static_extents()[:-2])
            or dst.static_extents()[-2:] != kl.gemm.c.buffer.static_shape()):
        return None
    bm, bn = dst.static_extents()[-2:]
    if dst.starts[-2] != kl.a.ostart or dst.starts[-1] != kl.b.ostart:
        return None
    row, col = _block_step(dst.starts[-2], s, bm), _block_step(dst.starts[-1], s, bn)
    if row is None or col is None or row == col:
        return None
    # everything else must be the same for every block: then blocks differ only in the
    # rows and columns they pick, and together they cover [0, grid * tile) of each
    ids = list(s.block_vars)
    rest = (kl.loop.stop, kl.a.koff, kl.b.koff, *kl.a.lead, *kl.b.lead, *dst.starts[:-2])
    if any(_uses(e, v) for e in rest for v in ids) or _loads(*dst.starts):
        return None
    return LaunchGemm(s, kl, out, row, col)


def _block_step(e: Expr, s: Launch, tile: int) -> int | None:
    """The grid index of block id v when e is `v * tile` (or `tile * v`), else None."""
    if not (isinstance(e, Call) and e.op is Op.MUL and len(e.args) == 2):
        return None
    x, y = e.args
    v, c = (x, y) if isinstance(x, Var) else (y, x)
    if not (isinstance(v, Var) and _is_const(c, tile)):
        return None
    names = [b.name for b in s.block_vars]
    return names.index(v.name) if v.name in names else None


# ------------------------------------------------------------------ expressions


def _is_const(e: Expr, value: int) -> bool:
    return isinstance(e, Const) and not e.dtype.is_float and int(e.value) == value


def _whole_local(r: Region) -> bool:
    """The whole of a 2-d block-local array (not a var, not a re-view)."""
    b: Buffer = r.buffer
    return (b.scope not in (Scope.GLOBAL, Scope.VAR) and b.data is None and b.ndim == 2
            and b.static_shape() is not None and all(_is_const(s, 0) for s in r.starts)
            and r.static_extents() == b.static_shape())


def _uses(e: Expr, v: Var) -> bool:
    if isinstance(e, Var):
        return e.name == v.name
    if isinstance(e, Call):
        return any(_uses(a, v) for a in e.args)
    if isinstance(e, Load):
        return any(_uses(i, v) for i in e.indices)
    return False


def _loads(*es: Expr) -> bool:
    """Any element read in the expressions (then a start may depend on data the loop
    writes; the matchers refuse those)."""
    for e in es:
        if isinstance(e, Load) or (isinstance(e, Call) and _loads(*e.args)):
            return True
    return False


def _coef(e: Expr, v: Var) -> int | None:
    """c when e is c * v + (terms without v), with c an integer constant; else None."""
    if not _uses(e, v):
        return 0
    if isinstance(e, Var):
        return 1
    if not isinstance(e, Call) or e.dtype.is_float:
        return None
    if e.op in (Op.ADD, Op.SUB) and len(e.args) == 2:
        x, y = (_coef(a, v) for a in e.args)
        if x is None or y is None:
            return None
        return x + y if e.op is Op.ADD else x - y
    if e.op is Op.MUL and len(e.args) == 2:
        x, y = e.args
        if _uses(y, v):
            x, y = y, x
        if _uses(y, v) or not isinstance(y, Const):
            return None
        cx = _coef(x, v)
        return None if cx is None else cx * int(y.value)
    return None


def _subst(e: Expr, v: Var, by: Expr) -> Expr:
    if isinstance(e, Var) and e.name == v.name:
        return by
    if isinstance(e, Call):
        return dataclasses.replace(e, args=tuple(_subst(a, v, by) for a in e.args))
    return e
