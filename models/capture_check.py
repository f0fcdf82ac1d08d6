"""The checks that make a replay safe: two recorded calls of a step must do the same
operations, and every array an operation reads must be an input's static buffer, written
earlier in the same step (by a kernel or a recorded copy), or the very same array on
both calls (a parameter, optimiser state, a cached constant). An array made afresh on the
host each call (labels converted in Python, a random key, a mask) would be stale on
replay: it is refused, naming the user's line. Also: the signature of a call.
"""

from __future__ import annotations

import numpy as np

from tilepy.ir.stmt import walk, written_params
from tilepy.models.errors import CaptureError, user_loc

_OUTPUTS: dict = {}  # id(kernel) -> (kernel, indices of parameters only written)


def root(a: np.ndarray) -> np.ndarray:
    """The array owning a's memory (a itself unless a is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def snapshot_key(args: tuple) -> tuple:
    """The signature a recording is kept under: each argument's shape and dtype (arrays,
    Tensors) or value, and the backend and mode."""
    from tilepy.backend import _current, current

    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(("array", a.shape, a.dtype.str))
        elif hasattr(a, "requires_grad") and hasattr(a, "data"):
            parts.append(("tensor", a.data.shape, a.data.dtype.str, a.requires_grad))
        else:
            try:
                hash(a)
            except TypeError:
                raise CaptureError(
                    f"a captured step takes arrays, Tensors and hashable values; got a "
                    f"{type(a).__name__}", user_loc(), hint="pass arrays (copied into the "
                    "capture's buffers) or capture a step that reads the object itself"
                ) from None
            parts.append(("value", type(a), a))
    chosen = _current.get()
    name, options = current() if chosen is None else chosen
    return tuple(parts), name, tuple(sorted((options or {}).items()))


def _outputs(kernel) -> frozenset:
    """Indices of the kernel parameters it writes without reading (pure outputs)."""
    hit = _OUTPUTS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    func = kernel.func
    reads = {b.root.name for s in walk(func.body) for b in s.reads()}
    writes = written_params(func)
    out = frozenset(i for i, p in enumerate(func.params)
                    if p.name in writes and p.name not in reads)
    _OUTPUTS[id(kernel)] = (kernel, out)
    return out


def _what(step) -> str:
    if step[0] == "launch":
        return f"kernel '{step[1].func.name}'"
    if step[0] in ("host", "call", "fill"):
        return f"'{getattr(step[1], '__qualname__', step[1])}'"
    if step[0] == "return":
        return "the step's returned value"
    return "a host copy" if step[0] == "copy" else "a gradient copy"


def _same_ops(a: list, b: list) -> None:
    if len(a) != len(b) or any(x[0] != y[0] or (x[0] in ("launch", "host", "fill", "call") and
                                                   x[1] is not y[1]) for x, y in zip(a, b)):
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x[0] != y[0] or x[1] is not y[1]),
                 min(len(a), len(b)))
        first = (f"{_what(a[i]) if i < len(a) else 'the end'} then "
                 f"{_what(b[i]) if i < len(b) else 'the end'}")
        loc = (b[i] if i < len(b) else a[i])[-1]
        raise CaptureError(
            f"two calls of the captured step with the same input shapes ran different "
            f"operations (operation {i}: {first}): Python control flow that depends on "
            f"data or on a count", loc,
            hint="make the step do the same operations every call, or run it without "
                 "capture")


class _Known:
    """Roots of the arrays a step has made so far (inputs, kernel and copy outputs)."""

    def __init__(self, inputs: list):
        self.ids = {id(r) for r in inputs}
        self.keep = list(inputs)

    def add(self, a) -> None:
        if isinstance(a, np.ndarray):
            r = root(a)
            self.ids.add(id(r))
            self.keep.append(r)

    def need(self, xa, xb, step, j) -> None:
        """xb (recording B's argument j) must be made in the step or be xa's array."""
        if not isinstance(xb, np.ndarray):
            return
        rb = root(xb)
        if id(rb) in self.ids or (isinstance(xa, np.ndarray) and root(xa) is rb):
            return
        raise CaptureError(
            f"{_what(step)} reads an array (argument {j}, shape {rb.shape}, dtype "
            f"{rb.dtype}) made anew on the host at each call; replay would reuse a stale "
            f"copy", step[-1],
            hint="compute it with tensor ops or pass it to the step as an input (values "
                 "computed in numpy or Python are not recomputed on replay)")


def check(a, b, inputs: list, out) -> None:
    """Refuse recordings `a`, `b` of two calls unless the replay of `b` is safe."""
    _same_ops(a.steps, b.steps)
    known = _Known(inputs)
    for sa, sb in zip(a.steps, b.steps):
        kind = sb[0]
        if kind == "launch":
            outs = _outputs(sb[1])
            for j, (xa, xb) in enumerate(zip(sa[2], sb[2])):
                if j not in outs:
                    known.need(xa, xb, sb, j)
            for x in sb[2]:
                known.add(x)
        elif kind in ("copy", "grad"):
            src = -2
            known.need(sa[src], sb[src], sb, 0)
            known.add(sb[-3])
        elif kind == "fill":
            for j, (xa, xb) in enumerate(zip(sa[3], sb[3])):
                known.need(xa, xb, sb, j + 1)
            known.add(sb[2])
        else:
            args = list(sb[2]) + list(sb[3].values())
            args_a = list(sa[2]) + list(sa[3].values())
            for j, (xa, xb) in enumerate(zip(args_a, args)):
                known.need(xa, xb, sb, j)
            if kind == "call":
                for x in _flat(sb[4]):
                    known.add(x)
    for x in _flat(_values(out)):
        known.need(None, x, ("return", None, user_loc()), 0)


def _values(out):
    if hasattr(out, "requires_grad") and hasattr(out, "data"):
        return out.data
    if isinstance(out, (tuple, list)):
        return [_values(v) for v in out]
    if isinstance(out, dict):
        return [_values(v) for v in out.values()]
    return out


def _flat(x) -> list:
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (tuple, list)):
        return [a for v in x for a in _flat(v)]
    return []

