"""The one error hierarchy of tilepy, and how an error points at the user's source.

Every error a user can see is a `TilepyError`. A message names the user's file and line,
shows the line with a caret under the column, says what was expected and what was got, and
gives one hint. No internal function name appears in a message.

This module is the public home of every error. Each class is defined in the lowest layer
that raises it and re-exported here (the same class object, so `isinstance` holds whichever
module it is imported from): `TilepyError` and `Loc` in precision/errors.py, the errors of
the IR and its runtimes in ir/errors.py; the front end's own errors are defined here.
"""

from __future__ import annotations

from tilepy.ir.errors import (  # noqa: F401  (re-exported)
    HINT_OOB,
    ArgumentError,
    KernelAssertionError,
    KernelRuntimeError,
    LoweringError,
    OutOfBoundsError,
    ParseError,
    RaceError,
    TileTypeError,
    UninitializedReadError,
    VerifyError,
)
from tilepy.precision.errors import NOLOC, Loc, TilepyError  # noqa: F401  (re-exported)


class TileSyntaxError(TilepyError):
    """Kernel source that the front end cannot turn into IR."""


class SizeError(TilepyError):
    """A block, tile or grid size that no launch can run: a block or tile size of 0 or
    below, a grid extent below 0, a block-local buffer larger than this machine's memory.
    Raised when the kernel is built where the size is known then, else when it is called."""


class ValidationError(TilepyError):
    """`tilepy.validate` arguments that do not describe a check: an unknown op, option or
    dtype, inputs that are missing or of the wrong shape, an output of the wrong shape."""


class MismatchError(TilepyError, AssertionError):
    """`tilepy.testing.assert_matches`: an output that fails validation (pytest shows the
    report: which elements, by how much, against which bound, which model fits better)."""


class NotPortableError(TilepyError):
    """A GPU feature with no meaning on the CPU reference (TMA, mbarriers, tcgen05...)."""


class TuneError(TilepyError):
    """`tilepy.autotune`: configs that do not describe a search, or no config that builds
    and runs."""


class KernelInputError(TilepyError):
    """Arrays handed to a library kernel's wrapper (tilepy.kernels: attention, sparse,
    top-k, ...) whose shapes, dtypes or index tables do not fit together."""


class TileLangWarning(UserWarning):
    """A construct whose Python meaning and TileLang's differ, run as TileLang runs it (the
    message names the line and what was done)."""
