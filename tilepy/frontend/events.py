"""TileLang's IKET profiling events in a kernel (`T.iket.mark`, `T.iket.range_push` /
`range_pop`, `with T.iket.range(name):`): GPU trace markers that change no value. Each is
checked (a non-empty name known when the kernel is built; pops match pushes) and recorded
on the PrimFunc as a hint, as written; no statement is emitted.
"""

from __future__ import annotations

import ast

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend.annotations import add_hint
from tilepy.frontend.values import describe

# the Builtin names tilepy.compat.tilelang.language.iket gives its in-kernel functions
MARKS = ("iket_mark", "iket_range_push", "iket_range_start")
POPS = ("iket_range_pop", "iket_range_end")


def _name(tr, node: ast.Call, loc: Loc, what: str, required: bool = True):
    arg = node.args[0] if node.args else next(
        (k.value for k in node.keywords if k.arg == "name"), None)
    if arg is None and not required:
        return None
    name = tr.expr(arg) if arg is not None else None
    if not isinstance(name, str) or not name:
        raise TileTypeError(f"T.iket.{what}: expected an event name, a non-empty string "
                            f"known when the kernel is built; got {describe(name)}", loc,
                            hint=f'e.g. T.iket.{what}("load_tile")')
    return name


def _stack(tr) -> list:
    return tr.__dict__.setdefault("iket_ranges", [])


def event(tr, node: ast.Call, loc: Loc, name: str):
    """`T.iket.mark(name, payload=...)` and `T.iket.range_push(name, ...)`."""
    what = name.removeprefix("iket_")
    label = _name(tr, node, loc, what)
    if what != "mark":
        _stack(tr).append(label)
    add_hint(tr, ast.unparse(node))
    return None


def pop(tr, node: ast.Call, loc: Loc, name: str):
    """`T.iket.range_pop(name=None)`: closes the innermost open range."""
    what = name.removeprefix("iket_")
    label, stack = _name(tr, node, loc, what, required=False), _stack(tr)
    if not stack:
        raise TileSyntaxError(f"T.iket.{what}() without a matching T.iket.range_push()", loc)
    if label is not None and label != stack[-1]:
        raise TileSyntaxError(f"T.iket.{what}({label!r}) does not match the open range "
                              f"{stack[-1]!r}", loc, hint="close ranges innermost first")
    stack.pop()
    add_hint(tr, ast.unparse(node))
    return None


def payload(tr, node: ast.Call, loc: Loc, name: str):
    """`T.iket.payload(value, dtype=...)` outside a mark's arguments: the value a trace
    would carry, recorded with the mark that takes it."""
    return ast.unparse(node)


def range_frame(tr, node: ast.With) -> None:
    """`with T.iket.range(name):` a range around the body, which runs as written."""
    loc = tr.loc(node)
    call = node.items[0].context_expr
    label = _name(tr, call, loc, "range")
    add_hint(tr, ast.unparse(call))
    _stack(tr).append(label)
    for st in node.body:
        tr.stmt(st)
    _stack(tr).pop()


HANDLERS = {n: event for n in MARKS}
HANDLERS.update({n: pop for n in POPS})
HANDLERS["iket_payload"] = payload
