"""List, set and dict comprehensions and generator expressions in a kernel, over build-time
iterables (`sum(s for s in shape)`, `[A[i, j] for j in range(4)]`): unrolled while the
kernel is built, in Python's order. Their elements may be runtime values; their iterables
and `if` filters must be known when the kernel is built.
"""

from __future__ import annotations

import ast

from tilepy.errors import Loc, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.traced import Traced
from tilepy.frontend.values import describe


def _items(tr, node, loc: Loc):
    """What `node`'s element (or key, value) evaluates to per iteration, in order."""
    out: list = []

    def walk(k: int) -> None:
        if k == len(node.generators):
            out.append((tr.expr(node.key), tr.expr(node.value)) if isinstance(
                node, ast.DictComp) else tr.expr(node.elt))
            return
        gen = node.generators[k]
        seq = tr.expr(gen.iter)
        if exprs.is_ir(seq) or not hasattr(seq, "__iter__"):
            raise TileTypeError(f"a comprehension in a kernel cannot iterate over "
                                f"{describe(seq)}", loc,
                                hint="iterate over a build-time sequence (range of ints, "
                                     "a shape, a list); use T.Parallel or T.serial for "
                                     "runtime loops")
        for item in seq:
            _bind(tr, gen.target, item, loc)
            keep = [tr.expr(c) for c in gen.ifs]
            if any(exprs.is_ir(c) for c in keep):
                raise TileTypeError("a comprehension's `if` in a kernel must be known when "
                                    "the kernel is built", loc,
                                    hint="use T.if_then_else(cond, a, b) on the element")
            if all(keep):
                walk(k + 1)

    tr.scopes.append({})  # the comprehension's own names, as in Python 3
    try:
        walk(0)
    finally:
        tr.scopes.pop()
    return out


def _bind(tr, target, item, loc: Loc) -> None:
    """Bind the loop target in the comprehension's scope (names outside it stay)."""
    if isinstance(target, ast.Name):
        tr.bind(target.id, item)
        return
    if not isinstance(target, (ast.Tuple, ast.List)) or exprs.is_ir(item) or \
            not hasattr(item, "__len__") or len(item) != len(target.elts):
        raise TileTypeError(f"cannot unpack {describe(item)} in a comprehension", loc)
    for t, v in zip(target.elts, item):
        _bind(tr, t, v, loc)


def comprehension(tr, node, loc: Loc):
    """The comprehension's value; runtime elements are Traced, so Python's sum, min, max
    on them build IR (the translator reads a Traced result back as its expression)."""
    wrap = lambda v: Traced(v, loc) if exprs.is_ir(v) else v  # noqa: E731
    items = [tuple(wrap(x) for x in it) if isinstance(node, ast.DictComp) else wrap(it)
             for it in _items(tr, node, loc)]
    if isinstance(node, ast.SetComp):
        return set(items)
    if isinstance(node, ast.DictComp):
        return dict(items)
    return items if isinstance(node, ast.ListComp) else iter(items)
