"""How validation reports a config or input mistake: a `ValidationError` at the user's line.

Owns `ConfigError`, the one constructor the validation modules call; the classes live in
tilepy/errors.py (the public home of every error).
"""

from __future__ import annotations

import sys

from tilepy.boundary import is_internal
from tilepy.errors import Loc, ValidationError


def caller_loc() -> Loc:
    """The first stack frame outside tilepy: the user's call of validate()."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return Loc(f.f_code.co_filename, f.f_lineno, 0) if f is not None else Loc()


def ConfigError(message: str, hint: str) -> ValidationError:  # noqa: N802 - a constructor
    """A `ValidationError` located at the user's call."""
    return ValidationError(message, caller_loc(), hint)
