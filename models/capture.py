"""Step capture and replay: `capture(train_step)` returns a callable that runs the step
eagerly, records what two calls of it do (kernel launches, host copies, whole host
operations such as an optimiser step), checks that the two recordings agree and that every
array a kernel reads is made inside the step or kept across steps, and from then on
replays the recorded sequence on the captured buffers: no autograd graph, no op dispatch,
no allocation by the ops. docs/models.md "Step capture and replay" gives the rules.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.capture_check import check, root, snapshot_key
from tilepy.models.errors import CaptureError, user_loc
from tilepy.models.kernels import launch as L
from tilepy.models.kernels import record as hooks
from tilepy.models.replay import Recording, build

__all__ = ["Capture", "capture"]


def capture(fn=None, *, warmup: int = 1, max_signatures: int = 8):
    """Wrap `fn(*inputs)` (a training step: forward, backward, optimiser step) for replay.
    Usable as `step = capture(train_step)` or as a decorator. The first `warmup` calls
    run eagerly, the next two run eagerly while recorded, later calls replay."""
    if fn is None:
        return lambda f: Capture(f, warmup=warmup, max_signatures=max_signatures)
    return Capture(fn, warmup=warmup, max_signatures=max_signatures)


class Capture:
    """A captured training step; one recording per input signature (shapes, dtypes,
    other arguments, backend and mode). `replays` counts the replayed calls."""

    def __init__(self, fn, warmup: int = 1, max_signatures: int = 8):
        self.fn, self.warmup, self.max_signatures = fn, int(warmup), int(max_signatures)
        self._graphs: dict = {}
        self.replays = 0
        self.captures = 0  # recordings completed (a re-capture counts again)

    def __call__(self, *args):
        if hooks.ACTIVE:
            raise CaptureError("a captured step was called inside another step being "
                               "captured", user_loc(), hint="capture the outer step only")
        key = snapshot_key(args)
        graph = self._graphs.get(key)
        if graph is not None and not graph.valid():
            graph = None
        if graph is None:
            if len(self._graphs) >= self.max_signatures and key not in self._graphs:
                raise CaptureError(
                    f"the captured step was called with {self.max_signatures + 1} different "
                    f"input signatures (shapes, dtypes, other arguments, backend)", user_loc(),
                    hint="pad inputs to a few fixed shapes, pass capture(..., "
                         "max_signatures=N), or call the step without capture")
            graph = self._graphs[key] = _Graph(self, args)
        out = graph(args)
        return out

    def records_next(self, *args) -> bool:
        """Whether a call with these arguments would be recorded (not a warm-up, not a
        replay): only such a call can be refused after running part or all of the step."""
        graph = self._graphs.get(snapshot_key(args))
        if graph is None or not graph.valid():
            return self.warmup < 1
        return graph.ops is None and graph.calls + 1 > self.warmup

    def reset(self) -> None:
        """Forget every recording (the next calls capture again)."""
        self._graphs.clear()


class _Graph:
    """The recording of one input signature: static input buffers, then the phases
    warm-up (eager), record A, record B (checked against A), replay."""

    def __init__(self, owner: Capture, args: tuple):
        self.owner = owner
        self.inputs = [_static(a) for a in args]
        self.calls = 0
        self.first = None  # recording A
        self.ops = self.names = self.result = self.guards = None

    def valid(self) -> bool:
        """Whether nothing the replay relies on changed: modules' train/eval flags,
        parameters' arrays (replaced, e.g. by assignment), optimiser layouts."""
        return self.guards is None or all(g() for g in self.guards)

    def __call__(self, args: tuple):
        for buf, a in zip(self.inputs, args):
            if _buffered(buf):
                _fill(buf, a)
        self.calls += 1
        if self.ops is not None:
            return self._replay()
        if self.calls <= self.owner.warmup:
            return self.owner.fn(*self._args())
        rec = Recording()
        hooks.ACTIVE.append(rec)
        try:
            out = self.owner.fn(*self._args())
        finally:
            hooks.ACTIVE.remove(rec)
        if self.first is None:
            self.first = rec
            return out
        check(self.first, rec, [root(_data(b)) for b in self.inputs if _buffered(b)], out)
        self.ops, self.names, self.result, self.guards = build(rec, out)
        self.first = None
        self.owner.captures += 1
        return self.result()  # a copy: replays overwrite this recording's arrays

    def _args(self) -> list:
        return [getattr(b, "_tensor", b) for b in self.inputs]

    def _replay(self):
        if L._PROFILE:
            L.replay_profiled(self.ops, self.names)
        else:
            L.replay(self.ops)
        self.owner.replays += 1
        return self.result()


class _StaticTensor:
    """A Tensor input's static buffer (its array) and the Tensor passed to the step."""

    def __init__(self, t):
        from tilepy.models.tensor import Tensor

        if t.requires_grad:
            raise CaptureError("a captured step takes inputs that do not require grad; got a "
                               f"Tensor of shape {t.shape} with requires_grad=True",
                               user_loc(), hint="pass the data as a numpy array")
        self.array = t.data.copy()
        self.shape = self.array.shape
        self._tensor = Tensor(self.array)


def _static(a):
    """An input's static buffer: a C-contiguous copy of an array, a _StaticTensor for a
    Tensor, the value itself for anything else (part of the signature)."""
    if isinstance(a, np.ndarray):
        return np.array(a, order="C", copy=True)
    if hasattr(a, "requires_grad") and hasattr(a, "data"):
        return _StaticTensor(a)
    return a


def _buffered(b) -> bool:
    """Whether an input is held in a static buffer (an array or a Tensor's array)."""
    return isinstance(b, _StaticTensor) or type(b) is np.ndarray


def _data(b):
    return getattr(b, "array", b)


def _fill(buf, a) -> None:
    """Copy a call's input into its static buffer (the signature guarantees shape/dtype)."""
    dst = _data(buf)
    np.copyto(dst, a.data if hasattr(a, "requires_grad") else a)
