"""Choosing where kernels run: `with tilepy.backend("interp"):`, or TILEPY_BACKEND.

Backends: "interp" (the reference interpreter), "jit" (Numba; `fast=True` for the fast
mode) and "py" (the JIT's generated source run by plain Python). The choice is a context
variable, so threads and nested contexts each see their own. Backends load lazily.
"""

from __future__ import annotations

import contextlib
import contextvars
import os

from tilepy.errors import TilepyError

BACKENDS = ("interp", "jit", "py")
DEFAULT = "interp"

_current: contextvars.ContextVar = contextvars.ContextVar("tilepy_backend", default=None)


def _check(name: str) -> str:
    if name not in BACKENDS:
        raise TilepyError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


def current() -> tuple[str, dict]:
    """The active backend name and its options."""
    chosen = _current.get()
    if chosen is not None:
        return chosen
    return _check(os.environ.get("TILEPY_BACKEND", DEFAULT) or DEFAULT), {}


@contextlib.contextmanager
def backend(name: str, **options):
    """Run the kernels called inside this block on backend `name` with `options`
    (interp: sanitize, random_order, seed, batch, trace; jit: fast)."""
    token = _current.set((_check(name), options))
    try:
        yield
    finally:
        _current.reset(token)


def run(func, arrays: dict, sizes: dict) -> None:
    """Run a PrimFunc on the active backend (arrays are checked and bound already)."""
    name, options = current()
    if name == "interp":
        from tilepy.interpreter import run as interp_run

        interp_run(func, arrays, sizes, **options)
        return
    from tilepy.jit import run as jit_run

    jit_run(func, arrays, sizes, tier="py" if name == "py" else "numba", **options)
