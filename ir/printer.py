"""The IR printer: a PrimFunc as stable, TileLang-style text that is valid Python syntax, with
`# file:line` comments mapping statements to the user's source (docs/ir.md).

Owns every node's spelling (the tables INFIX, COMPARE, FUNCS, FOR_KINDS, ALLOCS... that the
parser reads back). Never checks or changes a program: invalid IR prints too.
"""

from __future__ import annotations

import difflib
import math
import os
from collections import Counter

from tilepy.ir.errors import Loc
from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, full_region
from tilepy.ir.ops import Op
from tilepy.ir.stmt import (
    Alloc,
    Assert,
    Breakpoint,
    Fill,
    For,
    ForKind,
    If,
    Launch,
    Let,
    PrimFunc,
    Print,
    Store,
    Versioned,
    While,
    walk,
)
from tilepy.ir.tileops import REQUIRED, STMTS, surface
from tilepy.ir.types import Scope, bool_, float32, int32

# ---------------------------------------------------------------- spelling (shared with parser)

# Python operator precedence, loosest first; atoms (names, calls, subscripts) are ATOM.
P_OR, P_AND, P_NOT, P_CMP, P_BOR, P_BXOR, P_BAND, P_SHIFT, P_ADD, P_MUL, P_UNARY, P_POW = range(
    1, 13
)
ATOM = 13

INFIX: dict[Op, tuple[str, int]] = {
    Op.ADD: ("+", P_ADD), Op.SUB: ("-", P_ADD), Op.MUL: ("*", P_MUL), Op.DIV: ("/", P_MUL),
    Op.FLOORDIV: ("//", P_MUL), Op.MOD: ("%", P_MUL), Op.POW: ("**", P_POW),
    Op.BITAND: ("&", P_BAND), Op.BITOR: ("|", P_BOR), Op.BITXOR: ("^", P_BXOR),
    Op.SHL: ("<<", P_SHIFT), Op.SHR: (">>", P_SHIFT),
}
COMPARE: dict[Op, str] = {
    Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=",
}
BOOLOP: dict[Op, tuple[str, int]] = {Op.AND: ("and", P_AND), Op.OR: ("or", P_OR)}
UNARY: dict[Op, tuple[str, int]] = {
    Op.NEG: ("-", P_UNARY), Op.BITNOT: ("~", P_UNARY), Op.NOT: ("not ", P_NOT),
}
CASTS: dict[Op, str] = {Op.CAST: "cast", Op.CAST_SAT: "cast", Op.REINTERPRET: "reinterpret"}
FUNCS: dict[Op, str] = {
    op: {Op.SELECT: "if_then_else"}.get(op, op.value)
    for op in Op
    if op not in INFIX and op not in COMPARE and op not in BOOLOP and op not in UNARY
    and op not in CASTS
}
FOR_KINDS: dict[ForKind, str] = {
    ForKind.SERIAL: "serial", ForKind.PARALLEL: "Parallel",
    ForKind.PIPELINED: "Pipelined", ForKind.UNROLLED: "unroll",
}
ALLOCS: dict[Scope, str] = {
    Scope.SHARED: "alloc_shared", Scope.FRAGMENT: "alloc_fragment", Scope.LOCAL: "alloc_local",
}
# literals without a T.<dtype>(...) wrapper have these dtypes
DEFAULT_LITERAL = {bool: bool_, int: int32, float: float32}
INDENT = "    "


# ---------------------------------------------------------------- expressions


def format_expr(e) -> str:
    """An expression (or a Region, or a Buffer's name) as text."""
    if isinstance(e, Region):
        return format_region(e)
    if isinstance(e, Buffer):
        return e.name
    return _expr(e)[0]


def _expr(e) -> tuple[str, int]:
    """Text and precedence of an expression."""
    if isinstance(e, Const):
        return _const(e)
    if isinstance(e, Var):
        return e.name, ATOM
    if isinstance(e, Load):
        return f"{e.buffer.name}[{_indices(e.indices)}]", ATOM
    if isinstance(e, Call):
        return _call(e)
    return f"<?{type(e).__name__}>", ATOM


def _indices(idx) -> str:
    if not idx:
        return "()"
    return ", ".join(_expr(i)[0] for i in idx)


def _const(c: Const) -> tuple[str, int]:
    v = c.value
    if c.dtype.is_float and not math.isfinite(v):
        return f'T.{c.dtype.name}("{v!r}")', ATOM
    text = repr(v)
    if DEFAULT_LITERAL[type(v)] != c.dtype:
        return f"T.{c.dtype.name}({text})", ATOM
    negative = text.startswith("-")
    return text, P_UNARY if negative else ATOM


def _wrap(e, limit: int) -> str:
    """`e` as text, in parentheses when its precedence is not above `limit`."""
    text, prec = _expr(e)
    return f"({text})" if prec <= limit else text


def _call(c: Call) -> tuple[str, int]:
    op, a = c.op, c.args
    if op in INFIX and len(a) == 2:
        sym, p = INFIX[op]
        if op is Op.POW:  # right-associative: parenthesise both sides
            return f"{_wrap(a[0], p)} {sym} {_wrap(a[1], p)}", p
        return f"{_wrap(a[0], p - 1)} {sym} {_wrap(a[1], p)}", p
    if op in COMPARE and len(a) == 2:  # bit operands in parentheses, for the reader
        return f"{_wrap(a[0], P_SHIFT)} {COMPARE[op]} {_wrap(a[1], P_SHIFT)}", P_CMP
    if op in BOOLOP and len(a) == 2:
        sym, p = BOOLOP[op]
        return f"{_wrap(a[0], p)} {sym} {_wrap(a[1], p)}", p
    if op in UNARY and len(a) == 1 and not (op is Op.NEG and isinstance(a[0], Const)):
        sym, p = UNARY[op]
        return f"{sym}{_wrap(a[0], p)}", p
    if op in CASTS and len(a) == 1:
        sat = ", saturate=True" if op is Op.CAST_SAT else ""
        return f'T.{CASTS[op]}({_expr(a[0])[0]}, "{c.dtype.name}"{sat})', ATOM
    name = FUNCS.get(op, op.value)  # NEG of a literal: T.neg(1.5), as -1.5 is a literal
    return f"T.{name}({', '.join(_expr(x)[0] for x in a)})", ATOM


def format_region(r: Region) -> str:
    """`A` for a whole buffer, else `A[s0:s0 + e0, ...]` (`0:e` when a start is 0)."""
    if r == full_region(r.buffer) and len(r.starts) == r.buffer.ndim:
        return r.buffer.name
    parts = []
    for s, e in zip(r.starts, r.extents):
        if s == Const(0, int32):
            parts.append(f"0:{_expr(e)[0]}")
        else:
            start = _expr(s)[0]
            parts.append(f"{start}:{start} + {_wrap(e, P_ADD)}")
    return f"{r.buffer.name}[{', '.join(parts) if parts else '()'}]"


def format_access(x: Load | Region) -> str:
    """An element access as an expression, a region as `format_region` writes it."""
    return format_region(x) if isinstance(x, Region) else format_expr(x)


def format_shape(shape) -> str:
    if len(shape) == 1:
        return f"({_expr(shape[0])[0]},)"
    return "(" + ", ".join(_expr(s)[0] for s in shape) + ")"


def buffer_decl(b: Buffer) -> str:
    """`T.Tensor(shape, dtype[, src.data][, scope=...])`: a parameter or a view."""
    extra = f", {b.data.name}.data" if b.data is not None else ""
    if b.scope is not Scope.GLOBAL:
        extra += f', scope="{b.scope.value}"'
    return f'T.Tensor({format_shape(b.shape)}, "{b.dtype.name}"{extra})'


def alloc_text(b: Buffer) -> str:
    if b.data is None and b.scope in ALLOCS:
        return f'T.{ALLOCS[b.scope]}({format_shape(b.shape)}, "{b.dtype.name}")'
    if b.data is None and b.scope is Scope.VAR and b.shape == ():
        return f'T.alloc_var("{b.dtype.name}")'
    data = f", data={b.data.name}.data" if b.data is not None else ""
    return (f'T.alloc_buffer({format_shape(b.shape)}, "{b.dtype.name}", '
            f'scope="{b.scope.value}"{data})')


def tile_call_text(s) -> str:
    """`T.<name>(args, keyword=value)` of a tile op whose table entry has a Form."""
    form = STMTS[type(s)].form
    parts = [format_region(v) if isinstance(v, Region) else format_expr(v)
             for v in (getattr(s, a) for a in form.args)]
    for key, field, default in form.options:
        v = getattr(s, field)
        if default is REQUIRED or v != default:
            parts.append(f"{key}={v!r}")
    return f"{surface(s)}({', '.join(parts)})"


def format_loc(loc: Loc, short: dict[str, str] | None = None) -> str:
    """`file:line`, or `file:line:col` when the column is known; `short` maps a file to the
    name printed for it."""
    file = (short or {}).get(loc.file, loc.file)
    return f"{file}:{loc.line}:{loc.col}" if loc.col else f"{file}:{loc.line}"


SOURCE_HEADER = "# source: "


def short_names(func: PrimFunc) -> dict[str, str]:
    """Files of the function's locs whose base name is unique among them -> base name."""
    files = dict.fromkeys(s.loc.file for s in (func, *walk(func.body)) if s.loc.line)
    base = {f: os.path.basename(f) for f in files}
    counts = Counter(base.values())
    return {f: b for f, b in base.items() if b != f and counts[b] == 1}


# ---------------------------------------------------------------- statements


def format_diff(before: PrimFunc, after: PrimFunc, *, locs: bool = False) -> str:
    """A unified diff of two functions' text (what a pass changed); empty when equal."""
    a = format_func(before, locs=locs).splitlines(keepends=True)
    b = format_func(after, locs=locs).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"{before.name} (before)", f"{after.name} (after)"))


def _number(v) -> str:
    """A Python number as text the parser reads back (inf and nan as float("..."))."""
    return repr(v) if v == v and abs(v) != float("inf") else f'float("{v}")'


def format_func(func: PrimFunc, *, locs: bool = True) -> str:
    """The function as text; with `locs`, each statement ends in `# file:line`."""
    return _Printer(locs).func(func)


class _Printer:
    def __init__(self, locs: bool):
        self.locs = locs
        self.lines: list[str] = []
        self.declared: set[str] = set()
        self.short: dict[str, str] = {}

    def emit(self, depth: int, text: str, loc: Loc | None = None) -> None:
        if self.locs and loc is not None and loc.line:
            text = f"{text}  # {format_loc(loc, self.short)}"
        self.lines.append(INDENT * depth + text)

    def func(self, f: PrimFunc) -> str:
        if self.locs:
            self.short = short_names(f)
            self.lines.extend(SOURCE_HEADER + file for file in self.short)
        for v in f.sizes:
            dt = "" if v.dtype == int32 else f', "{v.dtype.name}"'
            self.lines.append(f'{v.name} = T.dynamic("{v.name}"{dt})')
        out = f"(out_idx={list(f.out_idx)})" if f.out_idx else ""
        self.lines.append(f"@T.prim_func{out}")
        params = ", ".join(f"{p.name}: {buffer_decl(p)}" for p in f.params)
        self.declared.update(p.name for p in f.params)
        self.emit(0, f"def {f.name}({params}):", f.loc)
        for hint in f.hints:  # recorded, not executed (ir/stmt.py PrimFunc.hints)
            self.lines.append(f"{INDENT}# hint: {hint}")
        if f.safe_values:
            pairs = ", ".join(f"{name}: {_number(value)}" for name, value in f.safe_values)
            self.lines.append(f"{INDENT}T.annotate_safe_value({{{pairs}}})")
        self.body(f.body, 1)
        return "\n".join(self.lines) + "\n"

    def body(self, body, depth: int) -> None:
        if not body:
            self.emit(depth, "pass")
        for s in body:
            self.declare_views(s, depth)
            self.stmt(s, depth)

    def declare_views(self, s, depth: int) -> None:
        """Declare (as `X = T.Tensor(..., Y.data)`) buffers the statement uses that no
        parameter or allocation declares: views of other buffers' storage."""
        for b in _own_buffers(s):
            self.declare(b, depth)

    def declare(self, b: Buffer, depth: int) -> None:
        if b.name in self.declared:
            return
        if b.data is not None:
            self.declare(b.data, depth)
        self.declared.add(b.name)
        self.emit(depth, f"{b.name} = {buffer_decl(b)}")

    def stmt(self, s, depth: int) -> None:
        handler = getattr(self, "s_" + type(s).__name__, None)
        if handler is None and STMTS.get(type(s)) and STMTS[type(s)].form:
            handler = self.tile_call
        if handler is None:
            self.emit(depth, f"<?{type(s).__name__}>")
            return
        handler(s, depth)

    def s_Alloc(self, s: Alloc, d: int) -> None:
        self.declared.add(s.buffer.name)
        text = alloc_text(s.buffer)
        if not s.zero_fill:  # the initfill pass's mark: `..., zero_fill=False)`
            text = text[:-1] + ", zero_fill=False)"
        self.emit(d, f"{s.buffer.name} = {text}", s.loc)

    def s_Let(self, s: Let, d: int) -> None:
        ann = "" if s.var.dtype == s.value.dtype else f": T.{s.var.dtype.name}"
        self.emit(d, f"{s.var.name}{ann} = {format_expr(s.value)}", s.loc)

    def s_Store(self, s: Store, d: int) -> None:
        self.emit(d, f"{s.buffer.name}[{_indices(s.indices)}] = {format_expr(s.value)}", s.loc)

    def s_Fill(self, s: Fill, d: int) -> None:
        v = s.value
        if isinstance(v, Const) and v == Const(0, s.dst.dtype) and not _negative_zero(v):
            self.emit(d, f"T.clear({format_region(s.dst)})", s.loc)
        else:
            self.emit(d, f"T.fill({format_region(s.dst)}, {format_expr(v)})", s.loc)

    def tile_call(self, s, d: int) -> None:
        """A tile op in its table form (ir/tileops.py: Form)."""
        self.emit(d, tile_call_text(s), s.loc)

    def s_Print(self, s: Print, d: int) -> None:
        args = [format_expr(a) for a in s.args]
        if s.msg:
            args.append(f"msg={s.msg!r}")
        self.emit(d, f"T.print({', '.join(args)})", s.loc)

    def s_Assert(self, s: Assert, d: int) -> None:
        msg = f", {s.msg!r}" if s.msg else ""
        self.emit(d, f"assert {format_expr(s.cond)}{msg}", s.loc)

    def s_Breakpoint(self, s: Breakpoint, d: int) -> None:
        self.emit(d, "breakpoint()", s.loc)

    def s_For(self, s: For, d: int) -> None:
        args = [s.start, s.stop, s.step]
        if s.step == Const(1, int32):
            args.pop()
            if s.start == Const(0, int32):
                args.pop(0)
        text = ", ".join(format_expr(a) for a in args)
        if s.num_stages:
            text += f", num_stages={s.num_stages}"
        if s.var.dtype != int32:
            text += f', dtype="{s.var.dtype.name}"'
        kind = FOR_KINDS.get(s.kind, str(s.kind))
        self.emit(d, f"for {s.var.name} in T.{kind}({text}):", s.loc)
        self.body(s.body, d + 1)

    def s_If(self, s: If, d: int, word: str = "if") -> None:
        self.emit(d, f"{word} {format_expr(s.cond)}:", s.loc)
        self.body(s.then_body, d + 1)
        nested = s.else_body[0] if len(s.else_body) == 1 else None
        if isinstance(nested, If) and all(b.name in self.declared for b in _own_buffers(nested)):
            self.s_If(nested, d, "elif")
        elif s.else_body:
            self.emit(d, "else:")
            self.body(s.else_body, d + 1)

    def s_Versioned(self, s: Versioned, d: int) -> None:
        apart = ", ".join(f"({a.name}, {b.name})" for a, b in s.apart)
        inb = ", ".join(format_access(x) for x in s.inbounds)
        inb = f", inbounds=[{inb}]" if s.inbounds else ""
        self.emit(d, f'if T.versioned({format_expr(s.cond)}, apart=[{apart}]{inb}, '
                     f'by="{s.by}"):', s.loc)
        self.body(s.body, d + 1)
        self.emit(d, "else:")
        self.body(s.fallback, d + 1)

    def s_While(self, s: While, d: int) -> None:
        self.emit(d, f"while {format_expr(s.cond)}:", s.loc)
        self.body(s.body, d + 1)

    def s_Launch(self, s: Launch, d: int) -> None:
        args = [format_expr(g) for g in s.grid]
        if len(s.threads) == 1:
            args.append(f"threads={s.threads[0]}")
        elif s.threads:
            args.append(f"threads={tuple(s.threads)}")
        names = [v.name for v in s.block_vars]
        target = ""
        if len(names) == 1:
            target = f" as {names[0]}"
        elif names:
            target = f" as ({', '.join(names)})"
        self.emit(d, f"with T.Kernel({', '.join(args)}){target}:", s.loc)
        self.body(s.body, d + 1)


def _negative_zero(c: Const) -> bool:
    return c.dtype.is_float and math.copysign(1.0, c.value) < 0


# ---------------------------------------------------------------- which buffers a statement names


def _own_buffers(s):
    """Buffers named by the statement itself (its header, not its nested bodies): what it
    reads and writes, and the storage an allocated re-view shares."""
    if isinstance(s, Alloc):
        return [s.buffer.data] if s.buffer.data is not None else []
    return [*s.reads(), *s.writes()]
