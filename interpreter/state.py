"""The execution state of one batch of blocks: scalars, buffers, lanes and the active mask.

Owns how values are laid out (axis 0 = the blocks of the batch, then one axis per enclosing
T.Parallel loop), how blocks are named in messages, and where each buffer's storage is.
It evaluates nothing and decides no numerics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilepy.ir.errors import NOLOC, Loc
from tilepy.ir.expr import Buffer, Const
from tilepy.ir.stmt import PrimFunc
from tilepy.ir.types import Scope


@dataclass(frozen=True)
class LaneVar:
    """A T.Parallel loop variable: its value is `start + step * arange(n)` along `axis`."""

    axis: int
    start: np.ndarray  # lane-free (varies at most with the block)
    step: int
    n: int


@dataclass
class Shared:
    """What all batches of one `run` share: the kernel, its global arrays, the options,
    and the race sanitizer's record of which block wrote each global element."""

    func: PrimFunc
    arrays: dict[str, np.ndarray]
    sizes: dict[str, int]
    sanitize: bool
    listener: object | None
    strict: bool = False  # out-of-range global element accesses raise (else masked)
    masked: object | None = None  # a masking.MaskReport to fill, or None
    writers: dict[str, np.ndarray] = field(default_factory=dict)
    globals_: dict[str, np.ndarray] = field(default_factory=dict)


class Ctx:
    """One batch of blocks of one launch, executing together (a batch of 1 is one block)."""

    def __init__(self, shared: Shared, grid: tuple[int, ...], lin: np.ndarray):
        self.shared = shared
        self.grid = grid
        self.lin = lin  # (B,) linear block ids: bx + gx * (by + gy * bz)
        self.B = len(lin)
        self.env: dict[str, np.ndarray] = {}
        self.lane_shape: tuple[int, ...] = (self.B,)
        self.lane_vars: dict[str, LaneVar] = {}
        self.lane_defs: dict[str, object] = {}  # load-free lane-varying Let definitions
        self.local: dict[str, np.ndarray] = {}  # name -> storage of shape (B, *shape)
        self.local_bufs: dict[str, Buffer] = {}
        self.init: dict[str, np.ndarray | None] = {}  # written flags; None once all written
        self.loc: Loc = NOLOC

    # ------------------------------------------------------------ lanes

    @property
    def depth(self) -> int:
        return len(self.lane_shape)

    def pad(self, v) -> np.ndarray:
        """`v` with trailing unit axes so it broadcasts against the current lanes."""
        v = np.asarray(v)
        d = len(self.lane_shape)
        if v.ndim == 0 or v.ndim == d:
            return v
        return v.reshape(v.shape + (1,) * (d - v.ndim))

    def bidx(self) -> np.ndarray:
        """Batch positions 0..B-1 along axis 0, padded to the lane depth."""
        return self.pad(np.arange(self.B))

    # ------------------------------------------------------------ blocks

    def block_coords(self, lin: int) -> tuple[int, ...]:
        out = []
        for g in self.grid:
            out.append(int(lin % g))
            lin //= g
        return tuple(out)

    def block_name(self, pos: int) -> str:
        """`block (bx, by)` for the block at batch position `pos`."""
        c = self.block_coords(int(self.lin[pos]))
        inner = ", ".join(str(x) for x in c)
        return f"block ({inner})" if len(c) != 1 else f"block {c[0]}"

    def name_of_lin(self, lin: int) -> str:
        c = self.block_coords(int(lin))
        return f"block ({', '.join(str(x) for x in c)})" if len(c) != 1 else f"block {c[0]}"

    # ------------------------------------------------------------ buffers

    def is_global(self, buf: Buffer) -> bool:
        return buf.scope is Scope.GLOBAL

    def global_array(self, buf: Buffer) -> np.ndarray:
        """The storage of a global buffer (a row-major re-view when `buf.data` is set)."""
        g = self.shared.globals_
        arr = g.get(buf.name)
        if arr is None:
            arr = self._resolve_global(buf)
            g[buf.name] = arr
        return arr

    def _resolve_global(self, buf: Buffer) -> np.ndarray:
        if buf.name in self.shared.arrays and buf.data is None:
            return self.shared.arrays[buf.name]
        if buf.data is None:
            raise KeyError(buf.name)
        base = self.global_array(buf.data)
        return base.reshape(self.static_shape(buf))

    def writer_array(self, buf: Buffer) -> tuple[np.ndarray, bool]:
        """Which block last wrote each element (-1: none), viewed with `buf`'s shape, and
        whether nothing was written yet (the record was just made)."""
        root = buf.root.name
        w = self.shared.writers.get(root)
        fresh = w is None
        if fresh:
            base = self.shared.arrays[root]
            w = np.full(base.shape, -1, dtype=np.int32)
            self.shared.writers[root] = w
        return w.reshape(self.global_array(buf).shape), fresh

    def storage(self, buf: Buffer) -> np.ndarray:
        """The array behind any buffer: globals as they are, locals with the batch axis."""
        if buf.scope is Scope.GLOBAL:
            return self.global_array(buf)
        arr = self.local.get(buf.name)
        if arr is None and buf.data is not None:
            base = self.storage(buf.data)
            arr = base.reshape((self.B,) + self.static_shape(buf))
            self.local[buf.name] = arr
        return arr

    def static_shape(self, buf: Buffer) -> tuple[int, ...]:
        out = []
        for s in buf.shape:
            if isinstance(s, Const):
                out.append(int(s.value))
            else:
                out.append(int(self.host_value(s)))
        return tuple(out)

    def host_value(self, e) -> int:
        """A size expression that does not depend on the block (sizes, constants)."""
        from tilepy.interpreter.evaluate import evaluate  # which imports this module

        v = np.asarray(evaluate(self, e, None))
        return int(v.reshape(-1)[0])
