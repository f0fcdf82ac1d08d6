"""The errors tilepy.models raises (TilepyError subclasses), located at the user's line:
the first stack frame outside tilepy's own files.
"""

from __future__ import annotations

import sys

from tilepy.boundary import is_internal
from tilepy.errors import Loc, TilepyError


class ModelError(TilepyError):
    """A model was given input it cannot take: wrong shape, dtype, label or checkpoint."""


def user_loc() -> Loc:
    """Where the user's code called into tilepy.models (the first frame outside tilepy)."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return Loc() if f is None else Loc(f.f_code.co_filename, f.f_lineno, 0)


def model_error(message: str, hint: str | None = None) -> ModelError:
    return ModelError(message, user_loc(), hint=hint)


class CaptureError(ModelError):
    """A training step cannot be captured for replay (models/capture.py), or a replay's
    assumptions no longer hold."""
