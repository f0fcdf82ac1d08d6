"""The public API's edge: a TilepyError leaving tilepy shows the user's frames only.

`api_boundary` wraps the entry points a user calls; a TilepyError passing one loses the
frames of tilepy's files and of the JIT's generated modules, in its traceback and in the
exceptions chained to it (TILEPY_TRACEBACK=full keeps them). Decides nothing about messages.
"""

from __future__ import annotations

import functools
import os
import sys
import types

from tilepy.errors import TilepyError

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIRS = tuple(
    os.path.join(_ROOT, d) + os.sep
    for d in ("tilepy", "ir", "interpreter", "jit", "precision", "parallel", "models"))
NOTE = "(tilepy's internal frames are hidden; set TILEPY_TRACEBACK=full to show them)"


def is_internal(filename: str) -> bool:
    """True for a file of tilepy itself or a module the JIT generated."""
    path = os.path.abspath(filename)
    if path.startswith(PACKAGE_DIRS):
        return True
    cache = sys.modules.get("tilepy.jit.diskcache")  # loaded only once the JIT ran
    return cache is not None and path.startswith(str(cache.cache_dir()) + os.sep)


def api_boundary(fn):
    """Decorate a public entry point so TilepyErrors leave it without internal frames."""

    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TilepyError as err:
            if os.environ.get("TILEPY_TRACEBACK", "").strip().lower() == "full":
                raise
            hide_internal_frames(err)
            if sys.version_info >= (3, 11):
                raise  # re-raises with the filtered traceback and adds no frame of its own
            raise err.with_traceback(err.__traceback__)  # noqa: B904 - 3.10: this frame stays

    return boundary


def hide_internal_frames(err: BaseException) -> None:
    """Drop internal frames from `err`'s traceback and from every exception chained to it."""
    todo, seen, hidden = [err], set(), False
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        tb = _user_frames(e.__traceback__)
        hidden |= _length(tb) != _length(e.__traceback__)
        e.__traceback__ = tb
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    notes = getattr(err, "__notes__", ())
    if hidden and NOTE not in notes and hasattr(err, "add_note"):
        err.add_note(NOTE)


def _user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    kept = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _length(tb: types.TracebackType | None) -> int:
    n = 0
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n
