"""The root of tilepy's error hierarchy and source locations: `TilepyError` and `Loc`.

They live in the lowest layer because every layer above raises them (parallel/ too, which
sits on precision/ alone). The errors of the IR and its runtimes are in ir/errors.py; the
public home of every error is `tilepy.errors`, which re-exports these same classes.
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
