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
from tilepy.frontend.repl import recover


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
    lines, first, file = _source_lines(fn)
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    tree = ast.parse(dedented)
    fn_def = tree.body[0]
    if not isinstance(fn_def, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TileSyntaxError(f"expected a function definition in {file}:{first}")
    return Source(fn_def, file, first - 1, indent)  # type: ignore[arg-type]


def _source_lines(fn) -> tuple[list[str], int, str]:
    """(lines, first line number, file name) of `fn`'s definition."""
    try:
        lines, first = inspect.getsourcelines(fn)
        return lines, first, inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as err:
        reason = err
    found = recover(fn)
    if found is not None:
        return found
    name = getattr(fn, "__name__", fn)
    file = getattr(getattr(fn, "__code__", None), "co_filename", "")
    if file == "<stdin>":
        raise TileSyntaxError(
            f"cannot read the source of {name!r}: it was typed at the Python prompt, and "
            "this Python keeps no source for it (nor was it found in readline's history)",
            hint=_WHERE) from None
    raise TileSyntaxError(f"cannot read the source of {name!r}: {reason}", hint=_WHERE) \
        from None


_WHERE = ("tilepy reads a kernel's source: put the kernel in a .py file and import it, or "
          "define it in IPython or Jupyter, or at the prompt of Python >= 3.13 (these keep "
          "the source); a function built with exec() needs a file name registered in "
          "linecache")


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
