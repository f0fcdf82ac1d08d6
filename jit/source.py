"""Writing generated Python: identifiers for IR names, and indented lines.

Owns only the shape of the text (valid, unique, readable identifiers; indentation;
source-location comments). It knows nothing of ops or statements.
"""

from __future__ import annotations

import keyword
import os
import re

from tilepy.ir.errors import Loc

RESERVED = frozenset({"np", "math", "prange", "range", "min", "max", "abs", "print", "bool",
                      "float", "int", "len", "True", "False", "None"})


class Names:
    """Python identifiers for IR names: the user's name when it is safe, else a variant.

    Names starting with '_' are the generator's own (temporaries, helpers)."""

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._of: dict[tuple[str, str], str] = {}
        self._tmp = 0

    def user(self, kind: str, name: str) -> str:
        key = (kind, name)
        if key in self._of:
            return self._of[key]
        base = re.sub(r"\W", "_", name) or "v"
        if base[0].isdigit() or base.startswith("_"):
            base = "v" + base
        if keyword.iskeyword(base) or base in RESERVED:
            base += "_"
        ident, n = base, 1
        while ident in self._taken:
            n += 1
            ident = f"{base}_{n}"
        self._taken.add(ident)
        self._of[key] = ident
        return ident

    def temp(self, hint: str = "t") -> str:
        self._tmp += 1
        return f"_{hint}{self._tmp}"


class Writer:
    """Lines of Python with an indentation level."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def comment(self, what: str, loc: Loc | None = None) -> None:
        where = f"  ({os.path.basename(loc.file)}:{loc.line})" if loc and loc.line else ""
        self.line(f"# {what}{where}")

    def indent(self) -> "_Indent":
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, w: Writer) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.depth += 1

    def __exit__(self, *exc) -> None:
        self.w.depth -= 1
