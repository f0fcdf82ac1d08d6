"""`tilepy.compile`: of a kernel, the Kernel as before (tilepy.kernel.compile); of a Python
function of tile ops, a CompiledGraph: traced per argument shapes and dtypes, transformed by
the graph passes, then run node by node with every node output in its memory-planned slot of
one arena (memory.py); `plan=False` allocates each output and drops it after its last use.
"""

from __future__ import annotations

import numpy as np

from tilepy.boundary import api_boundary
from tilepy.errors import TileTypeError
from tilepy.ir.stmt import PrimFunc
from tilepy.kernel import Kernel
from tilepy.kernel import compile as compile_kernel
from tilepy.tileop.graph import Graph, Value, _caller_loc, _tracing
from tilepy.tileop.passes import PASSES


def compile(func, out_idx=None, **options):  # noqa: A001 - TileLang's name
    """`tilepy.compile(prim_func, out_idx=[...])`: a Kernel that allocates those outputs;
    `tilepy.compile(fn, fuse=True)` of a function of tile ops: a CompiledGraph."""
    if not isinstance(func, (Kernel, PrimFunc)) and callable(func):
        return CompiledGraph(func, **options)
    return compile_kernel(func, out_idx, **options)


class CompiledGraph:
    """What `tilepy.compile(fn)` returns: call it with arrays."""

    def __init__(self, fn, fuse: bool = True, plan: bool = True, passes=None):
        self.fn, self.fuse, self.plan = fn, fuse, plan
        self.passes = PASSES if passes is None else tuple(passes)  # run when fuse
        self.__name__ = getattr(fn, "__name__", "graph")
        self._graphs: dict = {}

    def __repr__(self) -> str:
        return f"<tilepy.compile {self.__name__} fuse={self.fuse} plan={self.plan}>"

    @api_boundary
    def trace(self, *arrays) -> Graph:
        """The graph for arrays of these shapes and dtypes, after the passes."""
        key = tuple((np.shape(a), np.asarray(a).dtype.str) for a in arrays)
        if key not in self._graphs:
            self._graphs[key] = self._trace(arrays)
        return self._graphs[key]

    def _trace(self, arrays) -> Graph:
        from tilepy.precision.formats import get_format

        ins = [Value(np.shape(a), get_format(np.asarray(a).dtype), f"x{n}")
               for n, a in enumerate(arrays)]
        g = Graph(ins)
        _tracing.append(g)
        try:
            out = self.fn(*ins)
        finally:
            _tracing.pop()
        outs = list(out) if isinstance(out, tuple) else [out]
        if not all(isinstance(v, Value) for v in outs):
            raise TileTypeError(f"{self.__name__} must return tile ops' outputs (a value or a "
                                "tuple of them)", _caller_loc())
        g.outputs = outs
        if self.fuse:
            for p in self.passes:
                g = p(g)
        return g

    @api_boundary
    def memory_plan(self, *arrays):
        """The memory plan of the graph for arrays of these shapes and dtypes."""
        return self.trace(*arrays).memory_plan()

    @api_boundary
    def __call__(self, *arrays):
        g = self.trace(*arrays)
        if self.plan:
            return _run_planned(g, arrays)
        vals: dict[int, np.ndarray] = {id(v): a for v, a in zip(g.inputs, arrays)}
        last = {id(v): n for n, node in enumerate(g.nodes) for v in node.inputs}
        keep = {id(v) for v in g.outputs}
        for n, node in enumerate(g.nodes):
            res = node.op.kernel(*[vals[id(v)] for v in node.inputs])
            for v, a in zip(node.outputs, res if isinstance(res, tuple) else (res,)):
                vals[id(v)] = a
            for v in node.inputs:  # liveness: free what no later node reads
                if last[id(v)] == n and id(v) not in keep and v not in g.inputs:
                    del vals[id(v)]
        outs = [vals[id(v)] for v in g.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _run_planned(g: Graph, arrays):
    """Run g with each node output a view of its slot in one fresh arena; kernels get their
    outputs as arguments (a tile op's kernel writes every element of its outputs)."""
    mp = g.memory_plan()
    arena = np.empty(mp.peak_bytes, np.uint8)
    vals: dict[int, np.ndarray] = {id(v): a for v, a in zip(g.inputs, arrays)}
    for node in g.nodes:
        outs = []
        for v in node.outputs:
            s = mp.slot(v)
            n = int(np.prod(v.shape, dtype=np.int64))
            dt = v.dtype.np_dtype
            outs.append(arena[s.offset:s.offset + n * dt.itemsize].view(dt).reshape(v.shape))
            vals[id(v)] = outs[-1]
        node.op.kernel_into(*[vals[id(v)] for v in node.inputs], *outs)
    outs = [vals[id(v)] for v in g.outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)
