"""Choosing where kernels run: `with tilepy.backend("interp"):`, or TILEPY_BACKEND.

"jit" (the default: Numba, the interpreter's bits; `fast=True` for the fast mode), "interp"
(the reference interpreter: sanitizers, tracing, pdb) or "py" (the JIT's source run by plain
Python). The choice is a context variable (per thread and nested context); backends load lazily.
"""

from __future__ import annotations

import contextlib
import contextvars
import os

from tilepy.errors import TilepyError

DEFAULT = "jit"
OPTIONS = {  # the options each backend takes
    "jit": ("fast", "strict"),
    "interp": ("sanitize", "random_order", "seed", "batch", "trace", "strict", "masked"),
    "py": ("fast", "strict"),
}
BACKENDS = tuple(OPTIONS)

_current: contextvars.ContextVar = contextvars.ContextVar("tilepy_backend", default=None)


def _check(name: str, where: str = "") -> str:
    if name not in BACKENDS:
        raise TilepyError(f"unknown backend{where}: expected one of {', '.join(BACKENDS)}; "
                          f"got {name!r}")
    return name


def _check_options(name: str, options: dict) -> None:
    for opt in options:
        if opt not in OPTIONS[name]:
            owners = [b for b, opts in OPTIONS.items() if opt in opts]
            hint = (f"'{opt}' is an option of tilepy.backend({owners[0]!r})" if owners
                    else None)
            raise TilepyError(
                f"tilepy.backend({name!r}) takes the options {', '.join(OPTIONS[name])}; "
                f"got {opt!r}", hint=hint)


def current() -> tuple[str, dict]:
    """The active backend name and its options."""
    chosen = _current.get()
    if chosen is not None:
        return chosen
    name = os.environ.get("TILEPY_BACKEND", "") or DEFAULT
    return _check(name, " in TILEPY_BACKEND"), {}


@contextlib.contextmanager
def backend(name: str, **options):
    """Run the kernels called inside this block on backend `name` with `options`
    (jit, py: fast, strict; interp: sanitize, random_order, seed, batch, trace, strict,
    masked). strict=True: out-of-range global element accesses raise (TILEPY_STRICT=1)."""
    _check_options(_check(name), options)
    token = _current.set((name, options))
    try:
        yield
    finally:
        _current.reset(token)


def _strict_env() -> bool:
    """TILEPY_STRICT=1: strict mode for every backend unless the block chose."""
    return os.environ.get("TILEPY_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


PROFILER = None  # the active `tilepy.profile()` session (tilepy/profiling/), or None


def run(func, arrays: dict, sizes: dict) -> None:
    """Run a PrimFunc on the active backend (arrays are checked and bound already)."""
    if PROFILER is not None:  # the one check a launch pays when no profiler is on
        PROFILER.launch(func, arrays, sizes, _run)
    else:
        _run(func, arrays, sizes)


def _run(func, arrays: dict, sizes: dict) -> None:
    name, options = current()
    if "strict" not in options and _strict_env():
        options = {**options, "strict": True}
    if name == "interp":  # each backend loads on first use (DESIGN.md, Layers)
        from tilepy.interpreter import run as interp_run

        interp_run(func, arrays, sizes, **options)
        return
    from tilepy.jit import run as jit_run

    jit_run(func, arrays, sizes, tier="py" if name == "py" else "numba", **options)
