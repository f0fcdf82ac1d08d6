"""Inlining `@T.macro` helpers: their body is translated in place, at the call site.

A macro's parameters are bound to the caller's values (buffers, scalars, build-time
values); its statements go into the caller's current body; `return x` gives the call's
value. Names inside the macro resolve in the macro's own module and closure. A macro that
is a method (`@T.macro def f(self, ...)` called as `obj.f(...)`) sees its object as `self`.
"""

from __future__ import annotations

import inspect

from tilepy.errors import Loc, TilepyError, TileTypeError
from tilepy.frontend.source import environment, read_source


class Return(Exception):
    """Raised by a `return` statement to end the translation of a body (the kernel's or a
    macro's); carries the returned front-end value."""

    def __init__(self, value):
        self.value = value


def inline_macro(tr, fn, args: list, kwargs: dict, loc: Loc):
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise TileTypeError(f"{fn.__name__}(): {err}", loc) from None
    bound.apply_defaults()
    saved = tr.src, tr.env, tr.scopes
    tr.src, tr.env = read_source(fn), environment(fn)
    tr.scopes = [{}]
    if inspect.ismethod(fn):  # bind the object to the method's first parameter
        tr.bind(next(iter(inspect.signature(fn.__func__).parameters)), fn.__self__)
    for name, value in bound.arguments.items():
        tr.bind(name, value)
    try:
        for st in tr.src.fn_def.body:
            tr.stmt(st)
    except Return as r:
        return r.value
    except TilepyError as err:  # raised by build-time code without a line: the call's
        if err.loc.line or type(err).__init__ is not TilepyError.__init__:
            raise
        raise type(err)(err.message, loc, hint=err.hint) from None
    finally:
        tr.src, tr.env, tr.scopes = saved
    return None
