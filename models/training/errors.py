"""The errors of tilepy.models' training side: optimisers, data, checkpoints and fit().

Each is a TilepyError; `user_loc()` finds the user's frame (the first outside tilepy) so a
message can name the line that called into tilepy.
"""

from __future__ import annotations

import sys

from tilepy.boundary import is_internal
from tilepy.errors import Loc, TilepyError


class OptimizerError(TilepyError):
    """Bad optimiser or schedule arguments, or a parameter/gradient that does not fit."""


class DataError(TilepyError):
    """A data set or loader asked for something it cannot give."""


class CheckpointError(TilepyError):
    """A checkpoint file that is missing, corrupt, partial or of another model."""


class TrainingError(TilepyError):
    """A training loop that cannot go on (a NaN loss, a model that returns no Tensor)."""


def user_loc() -> Loc:
    """The first stack frame outside tilepy: where the user called in."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return Loc() if f is None else Loc(f.f_code.co_filename, f.f_lineno, 0)
