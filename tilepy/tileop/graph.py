"""Op graphs as data: values, nodes of tile ops over them, and tracing (`record`: a tile op
called on graph values while `tilepy.compile` traces a function adds a node). Passes live in
passes.py, compiling and running in compiled.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from tilepy.boundary import is_internal
from tilepy.errors import ArgumentError, Loc, TileTypeError
from tilepy.ir.expr import Const, Var
from tilepy.kernel import eval_index


class Value:
    """A value in a graph being traced: a graph input or one output of a node."""

    def __init__(self, shape: tuple[int, ...], dtype, name: str):
        self.shape, self.dtype, self.name = shape, dtype, name

    def __repr__(self) -> str:
        return f"<graph value {self.name}: {self.dtype}{list(self.shape)}>"

    def __array__(self, *a, **k):
        raise TileTypeError("a graph value is not an array while the graph is traced",
                            _caller_loc(), hint="only tile ops may take graph values")

    def _not_here(self, *a, **k):
        raise TileTypeError(f"{self.name} is a graph value: Python operators and indexing "
                            "do not apply to it", _caller_loc(),
                            hint="write the computation as a @tile_op and call it")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_here
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = _not_here
    __getitem__ = __pow__ = _not_here


@dataclass
class Node:
    op: object  # a TileOp
    inputs: list[Value]
    outputs: list[Value]


@dataclass
class Graph:
    inputs: list[Value]
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)

    def memory_plan(self, in_place: bool = True):
        """Where each node output lives: a MemoryPlan (tilepy/tileop/memory.py) with the
        arena's peak bytes against one buffer per output."""
        from tilepy.tileop.memory import plan

        return plan(self, in_place)

    def __str__(self) -> str:
        lines = [f"graph({', '.join(v.name for v in self.inputs)}):"]
        for n in self.nodes:
            outs = ", ".join(v.name for v in n.outputs)
            lines.append(f"    {outs} = {n.op.__name__}({', '.join(v.name for v in n.inputs)})")
        lines.append(f"    return {', '.join(v.name for v in self.outputs)}")
        return "\n".join(lines)


_tracing: list[Graph] = []


def _caller_loc() -> Loc:
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return Loc(f.f_code.co_filename, f.f_lineno, 0) if f is not None else Loc()


def record(op, args) -> Value | tuple[Value, ...]:
    """`op(*args)` on graph values: check the shapes, add a node, return its outputs."""
    if not _tracing:
        raise TileTypeError("graph values can only be used inside tilepy.compile",
                            _caller_loc())
    g = _tracing[-1]
    loc = _caller_loc()
    shapes = _output_shapes(op, args, loc)
    outs = [Value(s, b.dtype, f"t{sum(len(n.outputs) for n in g.nodes) + k}")
            for k, (s, b) in enumerate(zip(shapes, op.body.sig.outputs))]
    g.nodes.append(Node(op, list(args), outs))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _output_shapes(op, args, loc: Loc) -> list[tuple[int, ...]]:
    sig = op.body.sig
    who = op.__name__
    if len(args) != len(sig.params):
        raise ArgumentError(f"{who} takes {len(sig.params)} argument(s); got {len(args)}", loc)
    sizes: dict[str, int] = {}
    for buf, v in zip(sig.params, args):
        if not isinstance(v, Value):
            raise ArgumentError(f"{who}: argument {buf.name} must be a graph value (an input "
                                f"of the compiled function or a tile op's output); got "
                                f"{type(v).__name__}", loc)
        if v.dtype != buf.dtype or len(v.shape) != len(buf.shape):
            raise ArgumentError(f"{who}: argument {buf.name} expected {buf.dtype} with "
                                f"{len(buf.shape)} dimension(s); got {v.dtype}{list(v.shape)}",
                                loc)
        for d, (want, got) in enumerate(zip(buf.shape, v.shape)):
            if isinstance(want, Const) and int(want.value) != got or \
                    isinstance(want, Var) and sizes.setdefault(want.name, got) != got:
                raise ArgumentError(
                    f"{who}: argument {buf.name} has {got} in dimension {d}, but the "
                    f"annotation's {want} is {sizes.get(getattr(want, 'name', ''), want)}",
                    loc, hint="the sizes of a tile op's arguments must agree with its "
                              "annotations")
    return [tuple(eval_index(s, sizes) for s in b.shape) for b in sig.outputs]
