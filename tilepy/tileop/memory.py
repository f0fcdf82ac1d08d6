"""Memory planning for an op graph: each node output's live range (from the node that writes
it to the last node that reads it; graph outputs to the end), then storage in one arena by
first fit at the lowest offset, a value written in place of an input that dies at that node
when the node may legally overwrite it. Plans only; compiled.py runs the graph in the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.tileop.fuse import is_elementwise, loads_identity


@dataclass(frozen=True)
class Slot:
    """Where one value lives: bytes [offset, offset + size) of the arena."""

    value: str
    offset: int
    size: int
    first: int  # the node that writes it
    last: int  # the last node that reads it (len(nodes) for a graph output)
    in_place_of: str | None = None  # the input whose storage it took


@dataclass(frozen=True)
class MemoryPlan:
    """`peak_bytes`: the arena the planned graph needs; `unplanned_bytes`: every node output
    in a buffer of its own (what a graph without planning holds at its end); `live_bytes`:
    the most bytes live at once (the bound no plan beats). Graph inputs are the caller's and
    count in none of them."""

    slots: tuple[Slot, ...]
    peak_bytes: int
    unplanned_bytes: int
    live_bytes: int

    def slot(self, value) -> Slot:
        return next(s for s in self.slots if s.value == value.name)

    def __str__(self) -> str:
        lines = [f"{s.value}: [{s.offset}, {s.offset + s.size}) nodes {s.first}..{s.last}"
                 + (f" in place of {s.in_place_of}" if s.in_place_of else "")
                 for s in self.slots]
        cut = 1 - self.peak_bytes / self.unplanned_bytes if self.unplanned_bytes else 0.0
        lines.append(f"peak {self.peak_bytes} bytes (live at once {self.live_bytes}; "
                     f"unplanned {self.unplanned_bytes}: {cut:.0%} less)")
        return "\n".join(lines)


_ALIGN = 64  # every slot starts on a cache line


def nbytes(v) -> int:
    """v's bytes, rounded up to a whole number of cache lines (its slot's size)."""
    size = int(np.prod(v.shape, dtype=np.int64)) * v.dtype.np_dtype.itemsize
    return -(-size // _ALIGN) * _ALIGN


def last_uses(g) -> dict[int, int]:
    """id(value) -> the last node reading it (len(nodes) for the graph's outputs)."""
    last = {id(v): n for n, node in enumerate(g.nodes) for v in node.inputs}
    for v in g.outputs:
        last[id(v)] = len(g.nodes)
    return last


def plan(g, in_place: bool = True) -> MemoryPlan:
    """The memory plan of g (a graph.Graph; see the module docstring)."""
    last = last_uses(g)
    live: dict[int, Slot] = {}  # id(value) -> its slot while live
    slots: list[Slot] = []
    peak = live_peak = 0
    for n, node in enumerate(g.nodes):
        for v in node.outputs:
            size = nbytes(v)
            host = _in_place_input(g, node, v, n, last, live) if in_place else None
            if host is not None:
                h = live.pop(id(host))
                s = Slot(v.name, h.offset, size, n, last.get(id(v), n), host.name)
            else:
                s = Slot(v.name, _first_fit(live.values(), size), size, n,
                         last.get(id(v), n))
            live[id(v)] = s
            slots.append(s)
            peak = max(peak, s.offset + size)
        live_peak = max(live_peak, sum(s.size for s in live.values()))
        for v in node.inputs + node.outputs:  # free what no later node reads
            if id(v) in live and last.get(id(v), n) <= n:
                del live[id(v)]
    unplanned = sum(nbytes(v) for node in g.nodes for v in node.outputs)
    return MemoryPlan(tuple(slots), peak, unplanned, live_peak)


def _first_fit(live, size: int) -> int:
    """The lowest offset where `size` bytes overlap no live slot."""
    offset = 0
    for s in sorted(live, key=lambda s: s.offset):
        if s.offset >= offset + size:
            break
        offset = max(offset, s.offset + s.size)
    return offset


def _in_place_input(g, node, out, n: int, last: dict, live: dict):
    """An input that `out` may overwrite: an intermediate this node reads for the last
    time, of out's shape and dtype, read only at the output's own indices by an
    element-wise op (so each element is read before it is written, by the same block)."""
    body = node.op.body
    if len(node.outputs) != 1 or not is_elementwise(body):
        return None
    for k, v in enumerate(node.inputs):
        if id(v) not in live or last[id(v)] != n or v in g.outputs:
            continue
        if sum(x is v for x in node.inputs) != 1:
            continue
        if v.shape == out.shape and v.dtype == out.dtype and loads_identity(body, k):
            return v
    return None
