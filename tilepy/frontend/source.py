"""Reading a kernel function's source: its AST, its file, and where each node is.

The front end parses the kernel's Python source (as TileLang does) so every IR node can
carry the user's file, line and column. This module only finds and parses source; it
builds no IR.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass

from tilepy.errors import Loc, TileSyntaxError


@dataclass
class Source:
    """A function's parsed definition and the offsets that map its nodes to the file."""

    fn_def: ast.FunctionDef
    file: str
    line_offset: int
    col_offset: int

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 0)
        col = getattr(node, "col_offset", 0)
        return Loc(self.file, line + self.line_offset, col + self.col_offset)


def read_source(fn) -> Source:
    """Parse `fn`'s definition. Raises TileSyntaxError when its source is unavailable."""
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as err:
        raise TileSyntaxError(
            f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {err}",
            hint="kernels must be defined in a file or a REPL cell whose source Python "
                 "keeps (not built with exec from a string)",
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    tree = ast.parse(dedented)
    fn_def = tree.body[0]
    if not isinstance(fn_def, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TileSyntaxError(f"expected a function definition in {file}:{first}")
    return Source(fn_def, file, first - 1, indent)  # type: ignore[arg-type]


def environment(fn) -> dict:
    """The names a function's body can see: builtins, module globals, then its closure."""
    env = dict(vars(builtins))
    env.update(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # an empty cell: the name is not assigned yet
                pass
    return env
