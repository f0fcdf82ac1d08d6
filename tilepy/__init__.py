"""tilepy: a reference runtime for TileLang-style tile kernels.

This package owns the language front end, `Kernel` objects, the public API and the errors.
Importing it must stay fast: it never imports numba (the JIT is loaded lazily).
"""

from tilepy.errors import (
    ArgumentError,
    KernelRuntimeError,
    LoweringError,
    OutOfBoundsError,
    RaceError,
    TilepyError,
    TileSyntaxError,
    TileTypeError,
    UninitializedReadError,
    VerifyError,
)

__version__ = "0.1.0"

__all__ = [
    "ArgumentError", "KernelRuntimeError", "LoweringError", "OutOfBoundsError", "RaceError",
    "TilepyError", "TileSyntaxError", "TileTypeError", "UninitializedReadError", "VerifyError",
]

import types as _types  # noqa: E402

import tilepy.jit as _jit_layer  # noqa: E402  (light: numba loads on first compile)
from tilepy.backend import backend  # noqa: E402
from tilepy.kernel import Kernel, compile  # noqa: E402
from tilepy.kernel import jit as _jit_decorator  # noqa: E402
from tilepy.precision.formats import get_format as dtype  # noqa: E402


class _JitLayer(_types.ModuleType):
    """`tilepy.jit` is both the JIT layer (jit/) and TileLang's `@tilepy.jit` decorator:
    the module object is callable and decorates like `tilepy.kernel.jit`."""

    def __call__(self, fn=None, **options):
        return _jit_decorator(fn, **options)


_jit_layer.__class__ = _JitLayer
jit = _jit_layer

__all__ += ["Kernel", "backend", "compile", "dtype", "jit"]
