"""Where a rank is in the user's program: the public call it is in (`Call`) and the user's
file and line, found by walking the stack past tilepy's own layers, the standard library
and installed packages. Only records; stall.py turns what the ranks record into messages.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import sysconfig
from typing import NamedTuple

from tilepy.precision.errors import Loc

LAYERS = ("tilepy", "tilepy.ir", "tilepy.interpreter", "tilepy.jit", "tilepy.precision",
          "tilepy.parallel", "tilepy.models")
_skip: tuple[str, ...] | None = None


def _skipped() -> tuple[str, ...]:
    """Folder prefixes that are not the user's code (found once, without importing them)."""
    global _skip
    if _skip is None:
        dirs = set()
        for name in LAYERS:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                dirs.update(spec.submodule_search_locations)
        paths = sysconfig.get_paths()
        dirs.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
        _skip = tuple(d.rstrip("/\\") + "/" for d in dirs)
    return _skip


class Site(NamedTuple):
    """A frame's position, kept as code object and instruction (no locals stay alive)."""

    code: object
    lasti: int
    line: int

    def loc(self) -> Loc:
        col = 0
        positions = getattr(self.code, "co_positions", None)  # Python >= 3.11
        if positions is not None and self.lasti >= 0:
            pos = next(itertools.islice(positions(), self.lasti // 2, None), None)
            col = pos[2] if pos and pos[2] is not None else 0
        return Loc(self.code.co_filename, self.line, col)


def user_site(frame) -> Site | None:
    """The first frame, from `frame` outwards, in the user's code (None if there is none)."""
    skip = _skipped()
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(skip):
            return Site(code, frame.f_lasti, frame.f_lineno)
        frame = frame.f_back
    return None


def caller_site() -> Site | None:
    """The user's frame that made the current call into tilepy."""
    return user_site(sys._getframe(1))


def thread_site(ident: int | None) -> Site | None:
    """Where the thread `ident` is in the user's code right now (innermost user frame)."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    return user_site(frame)


class Call(NamedTuple):
    """A public communication call in progress: `name` as the user writes it
    ("comm.allreduce"), the communicator's id, the collective's number on it (1, 2, ...;
    0 for point-to-point), the peer of a point-to-point call, and the user's call site."""

    name: str
    comm: str
    seq: int
    peer: int | None
    site: Site | None

    def loc(self) -> Loc | None:
        return None if self.site is None else self.site.loc()

    def describe(self) -> str:
        """'comm.allreduce (collective #3 on the world communicator)', 'comm.recv from
        rank 1 (on the world communicator)'."""
        where = "the world communicator" if self.comm == "world" else \
            f"communicator {self.comm}"
        if self.seq:
            return f"{self.name} (collective #{self.seq} on {where})"
        if self.peer is None:
            return f"{self.name} (on {where})"
        way = "from" if self.name.endswith("recv") else "to"
        return f"{self.name} {way} rank {self.peer} (on {where})"
