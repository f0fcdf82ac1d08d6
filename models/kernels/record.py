"""The hooks through which a training step is recorded for capture and replay
(models/capture.py): the active recorder, and the calls ops, autograd and optimisers make
to it for the work they do outside launch(): host copies, whole host operations (an
optimiser step, a schedule, clipping), host fills (a random key), library calls and host
reads of values.
With no recorder active each hook is one list test.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

ACTIVE: list = []  # the recorder of the step being captured (at most one)


def copy_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """np.copyto(dst, src) (any cast), repeated on replay."""
    np.copyto(dst, src, casting="unsafe")
    if ACTIVE:
        ACTIVE[-1].copy(dst, src)
    return dst


def contiguous(a: np.ndarray) -> np.ndarray:
    """np.ascontiguousarray(a); a copy it makes is repeated on replay."""
    out = np.ascontiguousarray(a)
    # a new view of a's memory (a 0-d array comes back 1-d) is no copy: nothing to repeat
    if ACTIVE and out is not a and not np.may_share_memory(out, a):
        ACTIVE[-1].copy(out, a)
    return out


def astype(a: np.ndarray, dtype) -> np.ndarray:
    """a in `dtype` (a itself when it has it; else a fresh array, refilled on replay)."""
    if a.dtype == dtype:
        return a
    return copy_into(np.empty(a.shape, dtype), a)


def host_op(fn=None, *, replay=None):
    """Decorate a function whose work is host code (Python arithmetic, host reads and the
    launches they decide): a captured step records the call and replays it whole. With
    `replay`, `replay(*args, **kwargs)` gives the callable a replay runs instead: the same
    work, with what each call would look up again (a module's parameters) taken from
    the recorded call."""
    if fn is None:
        return functools.partial(host_op, replay=replay)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not ACTIVE or ACTIVE[-1].paused:
            return fn(*args, **kwargs)
        rec = ACTIVE[-1]
        # a generator (model.parameters()) would be empty on replay: keep its items
        args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
        rec.paused += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            rec.paused -= 1
        rec.host(fn, args, kwargs, replay(*args, **kwargs) if replay is not None else None)
        return out
    return wrapper


def replayed_call(fn, *args, **kwargs):
    """fn(*args, **kwargs) -> arrays (a library API): on replay called again, its results
    copied into the arrays of the captured call."""
    if not ACTIVE or ACTIVE[-1].paused:
        return fn(*args, **kwargs)
    rec = ACTIVE[-1]
    rec.paused += 1
    try:
        out = fn(*args, **kwargs)
    finally:
        rec.paused -= 1
    rec.call(fn, args, kwargs, out)
    return out


def filled(fn, out: np.ndarray, *args) -> np.ndarray:
    """fn(out, *args): host code that fills `out` (a random key drawn from a host
    generator); on replay called again, so `out` holds what the eager step would put."""
    fn(out, *args)
    if ACTIVE and not ACTIVE[-1].paused:
        ACTIVE[-1].fill(fn, out, args)
    return out


def host_read(what: str) -> None:
    """A value is being read on the host (a captured step refuses it)."""
    if ACTIVE and not ACTIVE[-1].paused:
        ACTIVE[-1].refuse_read(what)


def refuse(what: str, hint: str) -> None:
    """Something a captured step cannot replay is happening (refused while recording)."""
    if ACTIVE and not ACTIVE[-1].paused:
        ACTIVE[-1].refuse(what, hint)


def leaf_grad(t, g: np.ndarray) -> None:
    """t.grad = a copy of g in t's dtype; on replay the copy is refilled and re-bound
    (a zero_grad replayed before it may have set t.grad to None)."""
    t.grad = np.array(g, dtype=t.data.dtype, copy=True)
    if ACTIVE:
        ACTIVE[-1].grad(t, t.grad, g)
