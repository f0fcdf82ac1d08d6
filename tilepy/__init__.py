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

from tilepy.backend import backend  # noqa: E402
from tilepy.kernel import Kernel, compile, jit  # noqa: E402
from tilepy.precision.formats import get_format as dtype  # noqa: E402

__all__ += ["Kernel", "backend", "compile", "dtype", "jit"]
