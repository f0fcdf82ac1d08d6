"""The meaning of a tile op, evaluated directly: its index expressions over numpy index
grids, each reduction a sequential fold (k ascending from the identity) of the op table's
add/max/min. Independent of the tile schedule; tests compare the scheduled kernels with it.
"""

from __future__ import annotations

import numpy as np

from tilepy.ir.expr import Call, Const, Expr, Load, Var
from tilepy.ir.ops import Op, cast_values, reference
from tilepy.ir.stmt import ReduceKind
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import compute_dtype
from tilepy.tileop.body import OpBody, Red, free_indices

_FOLD = {ReduceKind.SUM: Op.ADD, ReduceKind.MAX: Op.MAX, ReduceKind.MIN: Op.MIN}


def evaluate(body: OpBody, arrays: dict[str, np.ndarray], sizes: dict[str, int]) -> list:
    """The outputs of the tile op for these inputs (by parameter name) and sizes."""
    values = {p.name: np.asarray(arrays[p.name]).astype(compute_dtype(p.dtype))
              for p in body.sig.params}
    outs = []
    for e, buf in zip(body.outs, body.sig.outputs):
        shape = tuple(_size(s, sizes) for s in buf.shape)
        env = {}
        for d, name in enumerate(list(body.index)[:len(shape)]):
            env[name] = np.arange(shape[d]).reshape([-1 if a == d else 1
                                                     for a in range(len(shape))])
        ev = _Eval(body, values, sizes)
        v = cast_values(np.asarray(ev.expr(e, env)), e.dtype, buf.dtype)
        outs.append(np.broadcast_to(v, shape).astype(buf.dtype.np_dtype))
    return outs


def _size(e: Expr, sizes: dict[str, int]) -> int:
    from tilepy.kernel import eval_index

    return eval_index(e, sizes)


class _Eval:
    def __init__(self, body: OpBody, values: dict, sizes: dict[str, int]):
        self.body, self.values, self.sizes = body, values, sizes
        self.memo: dict = {}  # a reduction's value per value of the reduction vars it uses

    def expr(self, e: Expr, env: dict):
        if isinstance(e, Const):
            return np.asarray(e.value, dtype=compute_dtype(e.dtype))
        if isinstance(e, Var):
            red = self.body.red(e)
            if red is not None:
                deps = set(free_indices(self.body, red.body)) - {red.var.name}
                key = (e.name, tuple((n, int(env[n])) for n in sorted(deps)
                                     if np.ndim(env[n]) == 0))
                if key not in self.memo:
                    self.memo[key] = self.fold(red, env)
                return self.memo[key]
            if e.name in env:
                return env[e.name]
            return np.asarray(self.sizes[e.name])
        if isinstance(e, Load):  # 0 outside the tensor
            arr = self.values[e.buffer.name]
            idx = [np.asarray(self.expr(ix, env)).astype(np.int64) for ix in e.indices]
            inside = np.asarray(True)
            for i, n in zip(idx, arr.shape):
                inside = inside & (i >= 0) & (i < n)
            got = arr[tuple(np.clip(i, 0, n - 1) for i, n in zip(idx, arr.shape))]
            return np.where(inside, got, np.zeros((), arr.dtype))
        assert isinstance(e, Call)
        args = [self.expr(a, env) for a in e.args]
        return reference(e.op, args, tuple(a.dtype for a in e.args), e.dtype)

    def fold(self, red: Red, env: dict):
        dt = red.out.dtype
        acc = np.asarray(reduce_identity(red.kind, dt)).astype(compute_dtype(dt))
        for k in range(_size(red.extent, self.sizes)):
            v = self.expr(red.body, {**env, red.var.name: np.asarray(k)})
            acc = reference(_FOLD[red.kind], [acc, v], (dt, dt), dt)
        return acc
