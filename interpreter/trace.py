"""The trace hook: what a running kernel tells a listener about its global traffic.

Owns the `Listener` protocol (no-op base class), the event records and `Recorder`, which
keeps every event in a list. Events are emitted per block, in block order then program
order; listeners must not change buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilepy.ir.errors import Loc


@dataclass(frozen=True)
class Access:
    """A block's load or store of a global buffer.

    A tile op (copy, atomic add, ...) gives the region's `starts` and `extents`; element
    accesses (scalar loads/stores, vectorised over a T.Parallel loop) give None for both.
    `elements` counts the elements actually moved (edge-tile parts outside are not)."""

    block: tuple[int, ...]
    buffer: str
    starts: tuple[int, ...] | None
    extents: tuple[int, ...] | None
    elements: int
    nbytes: int
    loc: Loc
    op: str  # "copy", "atomic_add", "load", "store", ...


@dataclass(frozen=True)
class GemmEvent:
    """A block's T.gemm: C (m, n) += A (m, k) @ B (k, n); flops = 2 * m * n * k."""

    block: tuple[int, ...]
    a: str
    b: str
    c: str
    m: int
    n: int
    k: int
    flops: int
    loc: Loc


class Listener:
    """Base listener: every callback does nothing; override the ones you need.

    Any object with these methods can be passed as `trace=` to `run`."""

    def on_launch(self, kernel: str, grid: tuple[int, ...]) -> None:
        """A T.Kernel launch starts (its blocks follow)."""

    def on_block(self, block: tuple[int, ...]) -> None:
        """A block starts running."""

    def on_load(self, event: Access) -> None:
        """A block read a global buffer."""

    def on_store(self, event: Access) -> None:
        """A block wrote a global buffer."""

    def on_gemm(self, event: GemmEvent) -> None:
        """A block ran a T.gemm."""


@dataclass
class Recorder(Listener):
    """Collects every event, in order, as ("launch" | "block" | "load" | "store" | "gemm",
    payload) pairs."""

    events: list = field(default_factory=list)

    def on_launch(self, kernel, grid):
        self.events.append(("launch", (kernel, grid)))

    def on_block(self, block):
        self.events.append(("block", block))

    def on_load(self, event):
        self.events.append(("load", event))

    def on_store(self, event):
        self.events.append(("store", event))

    def on_gemm(self, event):
        self.events.append(("gemm", event))

    def of_kind(self, kind: str) -> list:
        return [p for k, p in self.events if k == kind]

    def bytes_moved(self) -> int:
        return sum(p.nbytes for k, p in self.events if k in ("load", "store"))

    def flops(self) -> int:
        return sum(p.flops for k, p in self.events if k == "gemm")
