"""What a captured step records (`Recording`: launches, host copies, gradient bindings,
whole host operations, host fills, library calls) and how a checked recording becomes
the replay (`build`: bound launches and host callables, the returned value's copier, the guards
that say whether the recording still applies).
"""

from __future__ import annotations

import functools

import numpy as np

from tilepy.models.errors import CaptureError, user_loc
from tilepy.models.kernels import launch as L
from tilepy.models.replay_grads import bind as bind_grads
from tilepy.models.replay_grads import plan as grad_plan


class Recording:
    """The steps of one recorded call, in order: tuples whose first item is the kind
    ('launch', 'copy', 'grad', 'host', 'fill', 'call') and whose last is the user's
    line (a 'host' step: fn, args, kwargs, the callable its replay runs or None)."""

    def __init__(self):
        self.steps: list[tuple] = []
        self.paused = 0  # > 0 inside a host operation (recorded whole)
        self.modules: dict = {}  # id -> module called during the step

    def launch(self, kernel, arrays) -> None:
        if not self.paused:
            self.steps.append(("launch", kernel, tuple(arrays), user_loc()))

    def copy(self, dst, src) -> None:
        if not self.paused:
            self.steps.append(("copy", dst, src, user_loc()))

    def grad(self, t, dst, src) -> None:
        if not self.paused:
            self.steps.append(("grad", t, dst, src, user_loc()))

    def host(self, fn, args, kwargs, call=None) -> None:
        self.steps.append(("host", fn, args, kwargs, call, user_loc()))

    def fill(self, fn, out, args) -> None:
        self.steps.append(("fill", fn, out, args, user_loc()))

    def call(self, fn, args, kwargs, out) -> None:
        self.steps.append(("call", fn, args, kwargs, out, user_loc()))

    def module(self, m) -> None:
        self.modules[id(m)] = m

    def refuse_read(self, what: str) -> None:
        raise CaptureError(
            f"a captured step reads a value on the host ({what}); replay would not run "
            "that Python code", user_loc(),
            hint="return the tensor from the step and read it after the call, or run the "
                 "step without capture")

    def refuse(self, what: str, hint: str) -> None:
        raise CaptureError(f"a captured step cannot replay {what}", user_loc(), hint=hint)


def _recall(fn, args, kwargs, outs) -> None:
    new = fn(*args, **kwargs)
    for o, n in zip(_arrays(outs), _arrays(new)):
        np.copyto(o, n)


def _arrays(x) -> list:
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (tuple, list)):
        return [a for v in x for a in _arrays(v)]
    return []


def build(rec: Recording, out) -> tuple:
    """(ops [(callable, big)], launch names, the result maker, guards) of a recording."""
    ops, names = [], []
    swap, grads = grad_plan(rec, _values(out))
    run: list = []  # the gradient bindings of the current run of 'grad' steps
    for k, step in enumerate(rec.steps):
        kind = step[0]
        if kind == "grad":
            if not run:
                ops.append(None)
                names.append(None)
            run.append(grads[k])
            ops[-1] = (functools.partial(bind_grads, tuple(run)), None)
            continue
        run = []
        if kind == "launch":
            ops.append(L.bound(step[1], [swap.get(id(a), a) for a in step[2]]))
            names.append(step[1].func.name)
            continue
        if kind == "copy":
            call = functools.partial(np.copyto, step[1], step[2], casting="unsafe")
        elif kind == "host":
            call = step[4] or functools.partial(step[1], *step[2], **step[3])
        elif kind == "fill":
            call = functools.partial(step[1], step[2], *step[3])
        else:
            call = functools.partial(_recall, *step[1:5])
        ops.append((call, None))
        # a library call counts as a launch in profile() (as timed() counts it eagerly)
        names.append(f"{step[1].__name__} (library)" if kind == "call" else None)
    return ops, names, result_maker(out), _guards(rec)


def _values(x):
    """x with Tensors replaced by their arrays (a returned value's arrays)."""
    if hasattr(x, "requires_grad") and hasattr(x, "data"):
        return x.data
    if isinstance(x, (tuple, list)):
        return [_values(v) for v in x]
    if isinstance(x, dict):
        return [_values(v) for v in x.values()]
    return x


def result_maker(out):
    """A function giving a fresh copy of the step's returned value on each replay
    (Tensors and arrays copied, None, tuples, lists and dicts of them)."""
    from tilepy.models.tensor import Tensor

    if out is None:
        return lambda: None
    if isinstance(out, Tensor):
        arr = out.data
        return lambda: Tensor(arr.copy())
    if isinstance(out, np.ndarray):
        return out.copy
    if isinstance(out, (tuple, list)):
        parts = [result_maker(v) for v in out]
        return lambda: type(out)(f() for f in parts)
    if isinstance(out, dict):
        parts = {k: result_maker(v) for k, v in out.items()}
        return lambda: {k: f() for k, f in parts.items()}
    raise CaptureError(f"a captured step returned a {type(out).__name__} ({out!r:.40}): a "
                       "value computed on the host, which replay would not recompute",
                       user_loc(), hint="return Tensors or arrays (e.g. the loss tensor) "
                                        "and read them after the call")


def _guards(rec: Recording) -> list:
    """Checks that the replay still applies: every module called keeps its train/eval
    mode, every parameter of an optimiser stepped keeps its array."""
    guards = []
    for m in rec.modules.values():
        guards.append(functools.partial(_same_mode, m, m.training))
    for step in rec.steps:
        if step[0] == "host" and step[2] and hasattr(step[2][0], "param_groups"):
            params = [p for g in step[2][0].param_groups for p in g["params"]]
            guards.append(functools.partial(_same_data, params, [p.data for p in params]))
    return guards


def _same_mode(m, training: bool) -> bool:
    return m.training == training


def _same_data(params: list, arrays: list) -> bool:
    for p, a in zip(params, arrays):
        if p.data is not a:
            return False
    return True
