"""The errors raised by the IR layer and by the two runtimes over it (interpreter, JIT).

The interpreter and the JIT are siblings that raise the same classes (a fault reads the
same on either backend), so those classes live here, below both. The public home of every
error is `tilepy.errors`, which re-exports these same classes.
"""

from tilepy.precision.errors import NOLOC, Loc, TilepyError

__all__ = [
    "NOLOC", "Loc", "TilepyError", "TileTypeError", "ArgumentError", "VerifyError",
    "ParseError", "LoweringError", "KernelRuntimeError", "OutOfBoundsError", "HINT_OOB",
    "UninitializedReadError", "RaceError", "KernelAssertionError",
]


class TileTypeError(TilepyError):
    """Shapes, dtypes or argument kinds that do not fit an operation."""


class ArgumentError(TileTypeError):
    """Arrays passed to a kernel that do not match its signature."""


class VerifyError(TilepyError):
    """IR that breaks an invariant (found by the verifier)."""


class ParseError(TilepyError):
    """Printed IR text that the parser cannot read back."""


class LoweringError(TilepyError):
    """A construct the chosen backend cannot compile."""


class KernelRuntimeError(TilepyError):
    """A fault while a kernel runs; names the block id, buffer and index."""


class OutOfBoundsError(KernelRuntimeError):
    """A buffer access outside the buffer that is not a defined edge-tile access."""


HINT_OOB = ("guard the access with an `if` on the index, or read whole tiles with "
            "T.copy, whose global edge tiles are zero-filled")


class UninitializedReadError(KernelRuntimeError):
    """A read of shared/fragment/local memory that nothing wrote before."""


class RaceError(KernelRuntimeError):
    """Two blocks wrote the same global element without an atomic."""


class KernelAssertionError(TilepyError):
    """An `assert` in a kernel that failed: while the kernel was built (on build-time
    values), or while it ran (on run-time values; the message names the block)."""
