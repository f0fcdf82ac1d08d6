"""The one error hierarchy of tilepy, and how an error points at the user's source.

Every error a user can see is a `TilepyError`. A message names the user's file and line,
shows the line with a caret under the column, says what was expected and what was got, and
gives one hint. No internal function name appears in a message.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A place in the user's source: file, 1-based line, 0-based column."""

    file: str = "<unknown>"
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n") if self.line else ""


NOLOC = Loc()


class TilepyError(Exception):
    """Base of every tilepy error. `loc` is the user's source location, when known."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc if loc is not None else NOLOC
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.loc.line:
            parts.append(f"{self.loc}: {self.message}")
            src = self.loc.source_line()
            if src:
                stripped = src.lstrip()
                indent = len(src) - len(stripped)
                parts.append("    " + stripped)
                parts.append("    " + " " * max(self.loc.col - indent, 0) + "^")
        else:
            parts.append(self.message)
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


class TileSyntaxError(TilepyError):
    """Kernel source that the front end cannot turn into IR."""


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


class SizeError(TilepyError):
    """A block, tile or grid size that no launch can run: a block or tile size of 0 or
    below, a grid extent below 0, a block-local buffer larger than this machine's memory.
    Raised when the kernel is built where the size is known then, else when it is called."""
