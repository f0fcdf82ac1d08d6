"""Annotations a kernel makes about itself rather than statements it runs: safe values of
global buffers (`T.annotate_safe_value`, which changes what out-of-range loads give) and
TileLang's hardware-only hints (swizzles, layouts, warp policies), which are recorded on the
PrimFunc as text for the printed IR and never executed. Emits no statement.
"""

from __future__ import annotations

import ast

import numpy as np

from tilepy.errors import ArgumentError, Loc, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.dtypes import as_format
from tilepy.frontend.surface import SymbolicSize
from tilepy.frontend.values import describe
from tilepy.ir.expr import Buffer, Region
from tilepy.ir.types import Scope

# hints whose meaning is a GPU schedule or memory layout: the CPU reference has no such
# choice to make, and no result depends on them
HINTS = ("use_swizzle", "annotate_layout", "annotate_l2_hit_ratio", "no_set_max_nreg",
         "set_max_nreg", "annotate_restrict_buffers", "disable_warp_group_reg_alloc")


def func_attrs(tr) -> dict:
    """The PrimFunc keyword arguments the translator's annotations give."""
    return {"safe_values": tuple(getattr(tr, "safe_values", {}).items()),
            "hints": tuple(getattr(tr, "hints", ())),
            "scratch": tuple(tr.params.index(b) for b in getattr(tr, "scratch", ())),
            "pointees": tuple((tr.params.index(h), tr.params.index(t))
                              for h, t in getattr(tr, "pointees", {}).values())}


def add_hint(tr, text: str) -> None:
    hints = tr.__dict__.setdefault("hints", [])
    if text not in hints:
        hints.append(text)


def _buffer(tr, node: ast.expr, loc: Loc) -> Buffer:
    v = tr.value(node)
    if isinstance(v, Region):
        v = v.buffer
    if not isinstance(v, Buffer):
        raise TileTypeError(f"T.annotate_safe_value: expected a buffer; got {describe(v)}",
                            loc)
    return v


def _number(tr, node: ast.expr, loc: Loc):
    v = tr.expr(node)
    if exprs.is_ir(v) or isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TileTypeError(f"T.annotate_safe_value: expected a number known when the kernel "
                            f"is built; got {describe(v)}", loc,
                            hint="pass a Python int or float, e.g. 0.0 or -1")
    return v


def annotate_safe_value(tr, node: ast.Call, loc: Loc, name: str):
    """`T.annotate_safe_value({A: v, ...})` (TileLang's form) or `(A, v)`."""
    if len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
        pairs = list(zip(node.args[0].keys, node.args[0].values))
    elif len(node.args) == 2:
        pairs = [(node.args[0], node.args[1])]
    else:
        raise TileTypeError("T.annotate_safe_value takes {buffer: value} or (buffer, value)",
                            loc, hint="e.g. T.annotate_safe_value({A: -1.0})")
    safe = tr.__dict__.setdefault("safe_values", {})
    for k, v in pairs:
        buf = _buffer(tr, k, loc)
        if buf.scope is not Scope.GLOBAL:
            raise TileTypeError(f"T.annotate_safe_value: {buf.name} is {buf.scope} memory; "
                                "expected a global buffer (a kernel argument)", loc,
                                hint="only accesses of global buffers are masked")
        safe[buf.root.name] = _number(tr, v, loc)
    return None


def hint(tr, node: ast.Call, loc: Loc, name: str):
    """A hardware-only hint: recorded (as its source text) on the kernel, not executed."""
    add_hint(tr, ast.unparse(node))
    return None


HANDLERS = {"annotate_safe_value": annotate_safe_value}
HANDLERS.update({n: hint for n in HINTS})


def scalar_size(name: str, spec, loc: Loc) -> SymbolicSize:
    """`n: T.int32` in a kernel's signature: an integer argument, which the kernel sees as
    the symbolic size `n` (one compile serves every value)."""
    fmt = as_format(spec)
    if not fmt.is_int or fmt.is_bool:
        raise TileTypeError(f"scalar parameter {name!r} is {fmt}: expected an integer type "
                            "(a symbolic size)", loc,
                            hint="pass other scalars as one-element tensors")
    return SymbolicSize(name, fmt)


def bind_scalars(func, args, sizes: dict, loc: Loc) -> tuple:
    """The call's arguments without the scalar ones, whose values go to `sizes`."""
    if not func.scalars:
        return args
    slots = dict(func.scalars)
    if len(args) <= max(slots):
        return args  # too few arguments: the caller's count check says so
    for i, name in func.scalars:
        v = args[i]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ArgumentError(f"{func.name}: argument {i} ({name}) expected an int; got "
                                f"{type(v).__name__}", loc)
        sizes[name] = int(v)
    return tuple(a for i, a in enumerate(args) if i not in slots)
