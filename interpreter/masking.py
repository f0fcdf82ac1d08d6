"""TileLang's safe-memory-access rule for global element accesses, and its report.

An element load outside its global buffer gives the buffer's safe value (0 unless
`T.annotate_safe_value` set one) and an element store outside it is skipped (DESIGN.md).
Owns which lanes are masked and the record of them (`MaskReport`); strict mode, which
raises instead, is the caller's choice (sanitize.check_bounds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.ir.errors import Loc


@dataclass
class Masked:
    """The masked element accesses of one global buffer in one run."""

    buffer: str
    loads: int = 0
    stores: int = 0
    first_index: tuple[int, ...] | None = None
    first_block: str = ""
    loc: Loc | None = None  # the source line of the first masked access

    def __str__(self) -> str:
        where = f" at {self.loc}" if self.loc is not None and self.loc.line else ""
        index = ", ".join(str(i) for i in self.first_index or ())
        return (f"{self.buffer}: {self.loads} loads, {self.stores} stores outside the buffer; "
                f"first {self.buffer}[{index}] in {self.first_block}{where}")


class MaskReport:
    """Which out-of-range global element accesses a run masked (interpreter backend).

    Pass it as `tilepy.backend("interp", masked=report)` (or `run(..., masked=report)`);
    `report.entries` maps buffer name -> `Masked`, `str(report)` is one line per buffer.
    Tile ops' edge tiles are not counted: reading past the end there is the usual idiom."""

    def __init__(self):
        self.entries: dict[str, Masked] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __str__(self) -> str:
        if not self.entries:
            return "no masked accesses"
        return "\n".join(str(m) for m in self.entries.values())

    def __repr__(self) -> str:
        return f"<MaskReport {dict((k, (m.loads, m.stores)) for k, m in self.entries.items())}>"

    def total(self) -> tuple[int, int]:
        """(masked loads, masked stores) over every buffer."""
        return (sum(m.loads for m in self.entries.values()),
                sum(m.stores for m in self.entries.values()))

    def record(self, buffer: str, what: str, count: int, index, block: str, loc) -> None:
        m = self.entries.get(buffer)
        if m is None:
            m = self.entries[buffer] = Masked(buffer, first_index=tuple(index),
                                              first_block=block, loc=loc)
        if what == "read":
            m.loads += count
        else:
            m.stores += count


def in_range(idx: list[np.ndarray], shape) -> np.ndarray | None:
    """A bool array: the lanes whose index lies inside `shape`; None when all do."""
    ok = None
    for i, n in zip(idx, shape):
        lo, hi = (i.min(), i.max()) if i.size else (0, 0)
        if lo < 0 or hi >= n:
            b = (i >= 0) & (i < n)
            ok = b if ok is None else ok & b
    return ok


def note(ctx, buf, idx: list[np.ndarray], bad: np.ndarray, what: str) -> None:
    """Add the lanes `bad` (active and outside the buffer) to the run's report."""
    report = ctx.shared.masked
    if report is None or not bad.any():
        return
    lane = tuple(int(x) for x in np.unravel_index(int(np.argmax(bad.reshape(-1))), bad.shape))
    index = tuple(int(i[lane]) for i in idx)
    report.record(buf.name, what, int(bad.sum()), index,
                  ctx.block_name(lane[0] if lane else 0), ctx.loc)
