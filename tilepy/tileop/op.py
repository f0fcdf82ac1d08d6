"""`@tile_op`: a declarative operator. The decorated function's body is an index expression
over the output's index names; it is read once (errors point at the user's line), scheduled
to a tile-IR kernel (`op.kernel`, `op.kernel.ir`) with tile sizes from the cache model, and
run on the current backend when called with arrays. Called with graph values (inside a
function given to `tilepy.compile`) it records a node instead.
"""

from __future__ import annotations

import numpy as np

from tilepy.boundary import api_boundary
from tilepy.errors import Loc, TileTypeError
from tilepy.frontend.source import environment, read_source
from tilepy.ir.types import DType
from tilepy.kernel import Kernel, bind_arguments
from tilepy.precision.formats import get_format
from tilepy.tileop import schedule
from tilepy.tileop.backtoback import match_b2b
from tilepy.tileop.body import BodyTranslator, OpBody
from tilepy.tileop.graph import Value, record
from tilepy.tileop.implicit import match_implicit
from tilepy.tileop.lower import lower, match_gemm, reds_of
from tilepy.tileop.spec import read_signature


def tile_op(fn=None, *, tiles: dict | None = None, accum=None, index=None, tune=None):
    """`@tile_op` or `@tile_op(tiles={"i": 64, "k": 32}, accum="float64", index="b h i j")`:
    `tiles` fixes tile sizes by index name, `accum` a sum's accumulator dtype (default:
    float32 for narrower floats), `index` the output's index names (default i, j, l, m).
    `tune=True` measures the model's tiles and their neighbours on the first call per
    shapes (`tune={"i": [32, 64], ...}`: that grid) and runs the fastest (tileop/tuned.py)."""
    if fn is None:
        return lambda f: tile_op(f, tiles=tiles, accum=accum, index=index, tune=tune)
    return _build(fn, tiles, accum, index, tune)


@api_boundary
def _build(fn, tiles, accum, index, tune=None) -> "TileOp":
    return TileOp(fn, tiles, accum, index, tune=tune)


class TileOp:
    """A scheduled tile op. `kernel` is its Kernel; calling it runs that kernel."""

    def __init__(self, fn, tiles=None, accum=None, index=None, body: OpBody | None = None,
                 tune=None):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", None) or (body.name if body else "tile_op")
        self.__doc__ = getattr(fn, "__doc__", None)
        if body is None:
            body = parse(fn, accum, index)
        self.body = body
        self.user_tiles = dict(tiles or {})
        self.tiles = choose_tiles(body, self.user_tiles, self._where())
        self.kernel = Kernel(lower(body, self.tiles))
        self._into: Kernel | None = None
        self.tune_configs = tune if tune else None  # True: the model's neighbours
        self._tuned: dict = {}  # per shapes, dtypes and backend: the TuneResult

    @property
    def kernel_into(self) -> Kernel:
        """The kernel taking its outputs as arguments (what a memory-planned graph runs)."""
        if self._into is None:
            f = self.kernel.func
            self._into = Kernel(f.__class__(**{**f.__dict__, "out_idx": ()}))
        return self._into

    def kernel_with(self, tiles: dict) -> Kernel:
        """The kernel with these tiles (by `tiles=` names) over the user's and the model's."""
        chosen = choose_tiles(self.body, {**self.user_tiles, **tiles}, self._where())
        return Kernel(lower(self.body, chosen))

    def _where(self) -> Loc:
        return self.body.sig.output_locs[0]

    def __repr__(self) -> str:
        sig = self.body.sig
        ins = ", ".join(f"{b.name}:{b.dtype}" for b in sig.params)
        tiles = ", ".join(f"{k}={v}" for k, v in self.tiles.items())
        return f"<tile_op {self.__name__}({ins}) tiles: {tiles}>"

    @api_boundary
    def __call__(self, *args):
        if any(isinstance(a, Value) for a in args):
            return record(self, args)
        if self.tune_configs is not None:
            return self.tuned(*args).kernel(*args)
        return self.kernel(*args)

    @api_boundary
    def tuned(self, *args):
        """The tuning result for these arrays (`tune=` ops): `config` (the tiles by name
        changed from the model's), `kernel`, `tried` ([config, seconds]), `cached`."""
        from tilepy.tileop.tuned import tuned

        if self.tune_configs is None:
            raise TileTypeError(f"{self.__name__} is not tuned", self._where(),
                                hint="write @tile_op(tune=True) to tune its tile sizes")
        return tuned(self, args)

    @api_boundary
    def reference(self, *args):
        """The outputs computed directly from the index expressions (a sequential fold per
        reduction), without tiles: what the kernel must equal bit for bit."""
        from tilepy.kernel import _caller_loc
        from tilepy.tileop.reference import evaluate

        arrays, sizes = bind_arguments(self.kernel.func, args, _caller_loc())
        outs = evaluate(self.body, arrays, sizes)
        return outs[0] if len(outs) == 1 else tuple(outs)


def parse(fn, accum, index) -> OpBody:
    src = read_source(fn)
    sig = read_signature(fn, src)
    acc: DType | None = None
    if accum is not None:
        acc = get_format(accum)
    names = tuple(index.replace(",", " ").split()) if isinstance(index, str) else \
        tuple(index or ())
    return BodyTranslator(src, environment(fn), sig, names, acc).translate()


def choose_tiles(body: OpBody, user: dict, where: Loc) -> dict[str, int]:
    """Tile sizes by internal index name: the user's, else the cache model's."""
    known = set(body.index) | {r.name for r in body.reds}
    for name, size in user.items():
        if name not in known:
            raise TileTypeError(f"tiles names {name!r}, which is not an index of this op "
                                f"(its indices: {', '.join(sorted(known))})", where)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise TileTypeError(f"tile sizes are positive ints; got {name}={size!r}", where)
    tiles: dict[str, int] = {}
    for e, out in zip(body.outs, body.sig.outputs):
        names = list(body.index)[:len(out.shape)]
        g = match_gemm(body, e, names)
        m = None if g else match_implicit(body, e, names, reds_of(body, e))
        b2b = None if g or m else match_b2b(body, e, names)
        if b2b is not None:  # rows, columns, chunks of the inner result and of its sum
            b2b_names = names + [b2b.outer.var.name, b2b.inner.var.name]
            for n, t in zip(b2b_names, schedule.b2b_tiles()):
                tiles.setdefault(n, t)
        elif g is not None or m is not None:
            red, a = (g.red, g.a) if g else (m.red, m.a)
            bm, bn, bk = schedule.gemm_tiles(a.dtype.np_dtype.itemsize,
                                             red.out.dtype.np_dtype.itemsize)
            for n, t in zip(names[-2:] + [red.var.name], (bm, bn, bk)):
                tiles.setdefault(n, t)
        else:
            _row_tiles(body, e, names, tiles)
    for n in body.index:
        tiles.setdefault(n, 1)
    for r in body.reds:
        tiles.setdefault(r.var.name, 256)
    for n in list(tiles):
        red = next((r for r in body.reds if r.var.name == n), None)
        user_name = red.name if red else n
        if user_name in user:
            tiles[n] = user[user_name]
    return tiles


def _row_tiles(body: OpBody, e, names: list[str], tiles: dict[str, int]) -> None:
    """Rows and row chunks: the widest row tile, then shrink until each chunk fragment
    (the tiles of its indices times its chunk) fits a quarter of L2."""
    reds = reds_of(body, e)
    contr = {r.var.name for r in reds if _contraction(body, r, set(names[:-2]))}
    if contr:  # contractions inside (attention): gemm-sized row and column tiles; the
        # reductions over whole rows (keys) take rows up to 256 wide in one chunk, so
        # a row's contraction is computed once and read by the later passes
        bm, bn, bk = schedule.gemm_tiles(4, 4)
        if len(names) >= 2:
            tiles.setdefault(names[-2], bm)
        tiles.setdefault(names[-1], bn)
        outer = {r.var.name for r in reds if reds_of(body, r.body)}
        for red in reds:
            inner = red.var.name in contr and red.var.name not in outer
            tiles.setdefault(red.var.name, bk if inner else 256)
    live = 2 + len(reds) + len(_loads(body, e))  # fragments a block keeps
    widest = 1024 if reds else 256
    bm, bn = schedule.row_tiles(4 * live, widest=widest)
    if len(names) >= 2:
        tiles.setdefault(names[-1], bn)
        tiles.setdefault(names[-2], bm)
    elif names:
        tiles.setdefault(names[-1], bm if reds else bn)
    budget = schedule.caches().l2 // 4
    for red in reds:
        ext = red.extent
        chunk = min(widest, int(ext.value)) if hasattr(ext, "value") else widest
        tiles.setdefault(red.var.name, max(chunk, 1))
    for red in (r for r in reds if r.var.name not in contr):  # each chunk fragment
        # within the budget: halve its largest tile (a contraction has no chunk fragment)
        dims = [n for n in tiles if n in _free(body, red)] + [red.var.name]
        row = any(body.extents.get(n) == red.extent for n in names)
        # a chunk the output can reuse (a whole row) gets L2's budget, else it stays in L1
        limit = budget if row else schedule.caches().l1 // 2
        while 4 * int(np.prod([tiles[d] for d in dims])) > limit:
            big = max(dims, key=lambda n: tiles[n])
            if tiles[big] == 1:
                break
            tiles[big] //= 2


def _contraction(body: OpBody, red, lead: set) -> bool:
    """A sum of a product whose factors each use one index (besides the reduction's
    variable and the output's leading dims), different ones: lowered as a T.gemm."""
    from tilepy.ir.expr import Call
    from tilepy.ir.ops import Op
    from tilepy.tileop.body import free_indices

    b = red.body
    if red.kind.value != "sum" or not (isinstance(b, Call) and b.op is Op.MUL):
        return False
    uses = [set(free_indices(body, f)) - lead - {red.var.name} for f in b.args]
    return all(len(u) == 1 for u in uses) and uses[0] != uses[1]


def _free(body: OpBody, red) -> set[str]:
    from tilepy.tileop.body import free_indices

    return set(free_indices(body, red.body)) - {red.var.name}


def _loads(body: OpBody, e) -> set:
    from tilepy.tileop.lower import loads_of

    out = set(ld.buffer.name for ld in loads_of(e))
    for r in reds_of(body, e):
        out |= {ld.buffer.name for ld in loads_of(r.body)}
    return out

