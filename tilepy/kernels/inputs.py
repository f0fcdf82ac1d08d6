"""Input errors of the library kernels' wrappers, located at the user's call."""

from __future__ import annotations

import sys

from tilepy.boundary import is_internal
from tilepy.errors import KernelInputError, Loc


def input_error(message: str, hint: str) -> KernelInputError:
    """A KernelInputError at the first stack frame outside tilepy (the user's call)."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    loc = Loc(f.f_code.co_filename, f.f_lineno, 0) if f is not None else Loc()
    return KernelInputError(message, loc, hint)
