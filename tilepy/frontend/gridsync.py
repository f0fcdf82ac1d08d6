"""`T.sync_grid()`: a barrier across all blocks of a launch (a cooperative launch). On the
CPU reference it splits the launch in two at the barrier: every block finishes the first
part before any block starts the second. Block-local buffers and bindings are declared again
in the later part; one whose value would have to survive the barrier is refused."""

from __future__ import annotations

import dataclasses

from tilepy.errors import Loc, TileSyntaxError
from tilepy.frontend.builtins import Args
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Load, Var
from tilepy.ir.tileops import reads, writes, written_regions
from tilepy.ir.types import Scope


@dataclasses.dataclass(frozen=True)
class GridSync:
    """The barrier's place in a launch body, until the launch is split there."""

    loc: Loc


def sync_grid(tr, node, loc: Loc, name: str):
    Args(tr, node, [], loc, "T.sync_grid")
    if not tr.in_kernel or len(tr.bodies) != getattr(tr, "launch_depth", -1):
        raise TileSyntaxError("T.sync_grid: expected a statement of the T.Kernel body itself; "
                              "got one inside a loop or a branch", loc,
                              hint="every block must reach the barrier: put it at the top "
                                   "level of the launch")
    tr.bodies[-1].append(GridSync(loc))


def _var_names(x, out: set) -> set:
    if isinstance(x, Var):
        out.add(x.name)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _var_names(y, out)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            if f.name != "loc":
                _var_names(getattr(x, f.name), out)
    return out


def split(tr, bvars: tuple, body: tuple) -> list[tuple[tuple, tuple]]:
    """(block variables, body) of each launch the barriers in `body` cut it into; a later
    launch declares the earlier parts' buffers and load-free bindings again, renamed."""
    parts: list[list] = [[]]
    for s in body:
        if isinstance(s, GridSync):
            parts.append([])
        else:
            parts[-1].append(s)
    out = [(bvars, tuple(parts[0]))]
    for k in range(1, len(parts)):
        before = [s for p in parts[:k] for s in p]
        _check_carried(before, parts[k:], body)
        lets = [s for s in before if isinstance(s, S.Let) and not any(
            True for _ in _loads(s.value))]
        allocs = [s for s in before if isinstance(s, S.Alloc)]
        fresh: dict = {v: Var(tr.unique(v.name), v.dtype) for v in bvars}
        fresh.update({s.var: Var(tr.unique(s.var.name), s.var.dtype) for s in lets})
        fresh.update({s.buffer: dataclasses.replace(s.buffer, name=tr.unique(s.buffer.name))
                      for s in allocs})
        stmts = _subst(tuple(allocs) + tuple(lets) + tuple(parts[k]), fresh)
        out.append((tuple(fresh[v] for v in bvars), stmts))
    return out


def _subst(x, fresh: dict):
    """`x` with the variables and buffers of `fresh` replaced (IR nodes are frozen)."""
    if isinstance(x, (Var, Buffer)) and x in fresh:
        return fresh[x]
    if isinstance(x, tuple):
        return tuple(_subst(y, fresh) for y in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        new = {f.name: _subst(getattr(x, f.name), fresh) for f in dataclasses.fields(x)
               if f.name != "loc"}
        if any(new[n] is not getattr(x, n) for n in new):
            return dataclasses.replace(x, **new)
    return x


def _loads(e):
    if isinstance(e, Load):
        yield e
    elif dataclasses.is_dataclass(e) and not isinstance(e, type):
        for f in dataclasses.fields(e):
            yield from _loads(getattr(e, f.name))
    elif isinstance(e, tuple):
        for y in e:
            yield from _loads(y)


def _covers(s, name: str) -> bool:
    """Whether top-level statement `s` writes every element of buffer `name`."""
    if isinstance(s, S.Store):
        return s.buffer.name == name and s.buffer.static_shape() in ((), (1,))
    return any(r.buffer.name == name and tuple(r.extents) == tuple(r.buffer.shape)
               and all(getattr(x, "value", None) == 0 for x in r.starts)
               for r in written_regions(s))


def _read_before_defined(names: set, stmts: list) -> set:
    """Those of `names` that a statement reads before a top-level one overwrites them all."""
    out, defined = set(), set()
    for s in stmts:
        out |= {b.name for x in S.walk((s,)) for b in reads(x)} & (names - defined)
        defined |= {n for n in names if _covers(s, n)}
    return out


def _check_carried(before: list, later: list, body) -> None:
    local = {s.buffer.name for s in before if isinstance(s, S.Alloc)
             and s.buffer.scope is not Scope.GLOBAL}
    written = {b.name for s in S.walk(tuple(before)) for b in writes(s)} & local
    bound = {s.var.name: s for s in before if isinstance(s, S.Let)}
    used = _var_names(later, set())
    carried = sorted(_read_before_defined(written, [s for p in later for s in p])) + sorted(
        n for n, s in bound.items() if n in used and any(True for _ in _loads(s.value)))
    if carried:
        loc = next(s.loc for s in body if isinstance(s, GridSync))
        raise TileSyntaxError(
            f"T.sync_grid: expected block-local values not to cross the grid barrier; "
            f"{', '.join(carried)} would have to", loc,
            hint="on the CPU reference the launch is split at the barrier; keep values that "
                 "cross it in a global buffer")
