"""Regions in generated code: the loop nest over a tile, how each side of a tile op indexes
its buffer, and the clipping of global edge tiles (reads outside give 0, writes outside
are dropped). Shared by the tile-op emitters; emits no op semantics itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilepy.ir.errors import LoweringError
from tilepy.ir.expr import Const, Region
from tilepy.jit.bounds import check_region
from tilepy.jit.scalars import BufRef, Emitter
from tilepy.jit.source import Writer


def _is_one(e) -> bool:
    return isinstance(e, Const) and int(e.value) == 1


@dataclass
class Side:
    """One region of a tile op, its start temporaries bound in the generated code.

    `dims` are the buffer dimensions the tile iterates (extent not 1), in order."""

    region: Region
    ref: BufRef
    starts: list[str]
    exts: list[str]
    dims: list[int]

    @property
    def is_global(self) -> bool:
        return self.ref.kind == "global"

    def index(self, tvars: list[str], dims: list[int] | None = None) -> list[str]:
        """Buffer indices when the iterated dims take the offsets `tvars`."""
        dims = self.dims if dims is None else dims
        pos = {d: t for d, t in zip(dims, tvars)}
        return [(pos[d] if s == "0" else f"{s} + {pos[d]}") if d in pos else s
                for d, s in enumerate(self.starts)]


def bind_side(em: Emitter, w: Writer, region: Region, hint: str) -> Side:
    """Evaluate a region's starts and extents once, into temporaries."""
    ref = em.ref(region.buffer)
    starts, exts = [], []
    for s, e in zip(region.starts, region.extents):
        starts.append(_bind(em, w, s, hint))
        exts.append(em.expr(e) if isinstance(e, Const) else _bind(em, w, e, "n"))
    if ref.kind == "scalar":
        return Side(region, ref, [], [], [])
    if ref.kind == "array":  # once per op; the op's element loops then need no checks
        check_region(em, w, region, starts, exts, "write" if hint == "d" else "read")
    dims = [d for d, e in enumerate(region.extents) if not _is_one(e)]
    return Side(region, ref, starts, exts, dims)


def _bind(em: Emitter, w: Writer, e, hint: str) -> str:
    if isinstance(e, Const):
        return str(int(e.value))
    s = em.expr(e)
    if s.isidentifier():
        return s
    t = em.names.temp(hint)
    w.line(f"{t} = {s}")
    return t


def pair(a: Side, b: Side, what: str, em: Emitter) -> None:
    """Check that two sides iterate the same number of dims (unit dims dropped)."""
    if len(a.dims) != len(b.dims):
        sa = "x".join(a.exts[d] for d in a.dims) or "scalar"
        sb = "x".join(b.exts[d] for d in b.dims) or "scalar"
        raise LoweringError(
            f"{what}: the regions have different tile shapes ({sa} vs {sb})", loc=em.loc,
            hint="both sides must have the same shape once unit dimensions are dropped")


def tile_exts(a: Side, b: Side | None = None) -> list[str]:
    """Loop extents of a tile: a's extents, preferring a constant from b when a's is not."""
    out = []
    for k, d in enumerate(a.dims):
        e = a.exts[d]
        if b is not None and not e.isdigit() and b.exts[b.dims[k]].isdigit():
            e = b.exts[b.dims[k]]
        out.append(e)
    return out


def clip(em: Emitter, w: Writer, side: Side, exts: list[str], los: list[str],
         his: list[str]) -> str | None:
    """Narrow the loop bounds [lo_k, hi_k) so a global side stays inside its buffer.

    Emits the bound updates; returns the condition (as source) that the unit dims are in
    range, or None when there is none."""
    if not side.is_global:
        return None
    name = side.ref.name
    for k, d in enumerate(side.dims):
        s = side.starts[d]
        w.line(f"{los[k]} = max({los[k]}, -{s})")
        w.line(f"{his[k]} = min({his[k]}, {name}.shape[{d}] - {s})")
    conds = [f"0 <= {side.starts[d]} < {name}.shape[{d}]"
             for d in range(len(side.starts)) if d not in side.dims]
    return " and ".join(conds) if conds else None


def open_loops(em: Emitter, w: Writer, los: list[str], his: list[str]) -> list[str]:
    """Open one `for` per tile dim (outermost first); the caller closes them by depth."""
    tvars = []
    for lo, hi in zip(los, his):
        t = em.names.temp("i")
        w.line(f"for {t} in range({lo}, {hi}):" if lo != "0" else f"for {t} in range({hi}):")
        w.depth += 1
        tvars.append(t)
    return tvars


def bounds(em: Emitter, w: Writer, exts: list[str]) -> tuple[list[str], list[str]]:
    """Fresh lo/hi temporaries initialised to the full tile [0, ext)."""
    los, his = [], []
    for e in exts:
        lo, hi = em.names.temp("lo"), em.names.temp("hi")
        w.line(f"{lo} = 0")
        w.line(f"{hi} = {e}")
        los.append(lo)
        his.append(hi)
    return los, his
