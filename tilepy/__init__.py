"""tilepy: a reference runtime for TileLang-style tile kernels.

This package owns the language front end, `Kernel` objects, the public API and the errors.
`import tilepy` loads this module alone: the public names load on first use (PEP 562), so
`import tilepy.ir` loads ir/ and the layers below it, and numba loads on the first compile.
"""

import importlib as _importlib
import sys as _sys
import types as _types

__version__ = "0.1.0"

_ERRORS = ("ArgumentError", "KernelRuntimeError", "LoweringError", "OutOfBoundsError",
           "RaceError", "TilepyError", "TileSyntaxError", "TileTypeError",
           "UninitializedReadError", "VerifyError", "KernelAssertionError", "NotPortableError")
_NAMES = {  # public name -> (module, attribute)
    **{name: ("tilepy.errors", name) for name in _ERRORS},
    "Kernel": ("tilepy.kernel", "Kernel"),
    "compile": ("tilepy.tileop.compiled", "compile"),
    "dtype": ("tilepy.precision.formats", "get_format"),
    "validate": ("tilepy.validation", "validate"),
    "tile_op": ("tilepy.tileop", "tile_op"),
    "Tensor": ("tilepy.tileop", "Tensor"),
    "symbolic": ("tilepy.tileop", "symbolic"),
    "profile": ("tilepy.profiling", "profile"),
    "autotune": ("tilepy.tuning", "autotune"),
}
_SUBMODULES = frozenset({"errors", "language", "kernel", "kernels", "cli", "frontend", "ir",
                         "interpreter", "precision", "parallel", "models",
                         "tileop", "validation", "testing", "views",
                         "profiling", "tuning"})

__all__ = [*_ERRORS, "Kernel", "backend", "compile", "dtype", "jit", "tile_op", "Tensor",
           "symbolic", "validate", "profile", "autotune"]


def __getattr__(name: str):
    if name in _NAMES:
        module, attr = _NAMES[name]
        value = getattr(_importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tilepy' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__, *_SUBMODULES})


class _JitLayer(_types.ModuleType):
    """`tilepy.jit` is both the JIT layer (jit/) and TileLang's `@tilepy.jit` decorator:
    the module object is callable and decorates like `tilepy.kernel.jit`."""

    def __call__(self, fn=None, **options):
        from tilepy.kernel import jit  # the front end loads on first use

        return jit(fn, **options)


class _Package(_types.ModuleType):
    """The type of this module. `tilepy.jit` and `tilepy.backend` name both a submodule and a
    public callable; importing the submodule binds it here (the import system sets the
    attribute), so these properties keep the callable whichever loads first."""

    @property
    def jit(self):
        return _importlib.import_module("tilepy.jit")  # made callable by the setter

    @jit.setter
    def jit(self, module):
        module.__class__ = _JitLayer

    @property
    def backend(self):
        return _importlib.import_module("tilepy.backend").backend

    @backend.setter
    def backend(self, module):
        pass  # the submodule stays reachable as sys.modules["tilepy.backend"]


_sys.modules[__name__].__class__ = _Package
