"""The IR parser: reads the printer's text back into a PrimFunc (`parse(format_func(f)) == f`).

Reads the text with Python's `ast` (the printed form is Python syntax) and the `# file:line`
comments with `tokenize`; spellings come from the printer's tables. It types calls with the
op table's rules and raises ParseError with the text's line and column; it never verifies.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import linecache
import os
import re
import tokenize

from tilepy.ir import printer as P
from tilepy.ir.errors import NOLOC, Loc, ParseError, TileTypeError
from tilepy.ir.expr import Buffer, Call, Const, Load, Region, Var, full_region
from tilepy.ir.ops import Op, result_dtype
from tilepy.ir.stmt import (
    Alloc,
    Assert,
    Breakpoint,
    Fill,
    For,
    If,
    Launch,
    Let,
    PrimFunc,
    Print,
    ReduceKind,
    Store,
    Versioned,
    While,
)
from tilepy.ir.tileops import REQUIRED, STMTS
from tilepy.ir.types import Scope, dtype, int32, is_dtype_name

_AST_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>", ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<",
    ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.And: "and", ast.Or: "or",
    ast.USub: "-", ast.Invert: "~", ast.Not: "not ",
}
_BY_SYMBOL = {
    **{sym: op for op, (sym, _) in P.INFIX.items()},
    **{sym: op for op, sym in P.COMPARE.items()},
    **{sym: op for op, (sym, _) in P.BOOLOP.items()},
}
_UNARY_BY_SYMBOL = {sym: op for op, (sym, _) in P.UNARY.items()}
_FUNC_BY_NAME = {**{name: op for op, name in P.FUNCS.items()}, "neg": Op.NEG}
_KIND_BY_NAME = {name: kind for kind, name in P.FOR_KINDS.items()}
_SCOPE_BY_ALLOC = {name: scope for scope, name in P.ALLOCS.items()}
# T.<name> -> (statement kind, its `kind` field or None), for tile ops with a table Form
_FORMS = {n[2:]: (cls, k) for cls, d in STMTS.items() if d.form
          for n, k in ([(d.surface.format(kind=v.value), v) for v in ReduceKind]
                       if "{kind}" in d.surface else [(d.surface, None)])}
_LOC_RES = (re.compile(r"^(.*):(\d+):(\d+)$"), re.compile(r"^(.*):(\d+)()$"))


def parse(text: str, filename: str = "<ir>") -> PrimFunc:
    """The PrimFunc a printed text describes; statement locs come from its comments.

    Errors are ParseErrors located in the text (`filename`, line, column)."""
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    try:
        tree = ast.parse(text, filename)
    except SyntaxError as e:
        loc = Loc(filename, e.lineno or 0, max((e.offset or 1) - 1, 0))
        raise ParseError(f"not valid IR text: {e.msg}", loc) from None
    return _Parser(filename, _comment_locs(text)).module(tree)


def _comment_locs(text: str) -> dict[int, Loc]:
    """Line number -> the source location its trailing `# file:line[:col]` comment names."""
    out: dict[int, Loc] = {}
    full: dict[str, str] = {}  # printed base name -> file, from `# source: FILE` headers
    try:
        comments = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return out  # ast.parse has already accepted the text; a tokenizer hiccup only loses locs
    for tok in comments:
        if tok.string.startswith(P.SOURCE_HEADER):
            file = tok.string[len(P.SOURCE_HEADER):]
            full[os.path.basename(file)] = file
    for tok in comments:
        body = tok.string[1:].strip()
        m = _LOC_RES[0].match(body) or _LOC_RES[1].match(body)
        if m and not tok.string.startswith(P.SOURCE_HEADER):
            out[tok.start[0]] = Loc(full.get(m[1], m[1]), int(m[2]), int(m[3] or 0))
    return out


class _Parser:
    def __init__(self, filename: str, locs: dict[int, Loc]):
        self.filename = filename
        self.locs = locs
        self.vars: dict[str, Var] = {}
        self.buffers: dict[str, Buffer] = {}

    # ------------------------------------------------------------ helpers

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> ParseError:
        loc = Loc(self.filename, getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        return ParseError(message, loc, hint)

    def loc(self, node: ast.AST) -> Loc:
        return self.locs.get(node.lineno, NOLOC)

    def t_name(self, node: ast.AST) -> str | None:
        """`name` for a node `T.name` (or `T.name(...)`), else None."""
        if isinstance(node, ast.Call):
            node = node.func
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "T"):
            return node.attr
        return None

    def kwargs(self, call: ast.Call, allowed: set[str]) -> dict[str, ast.AST]:
        out = {}
        for kw in call.keywords:
            if kw.arg not in allowed:
                raise self.error(kw.value, f"unexpected keyword argument {kw.arg!r}",
                                 f"allowed here: {', '.join(sorted(allowed)) or 'none'}")
            out[kw.arg] = kw.value
        return out

    def nargs(self, call: ast.Call, lo: int, hi: int) -> list[ast.AST]:
        if not lo <= len(call.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise self.error(call, f"expected {want} positional arguments; "
                                   f"got {len(call.args)}")
        return call.args

    def literal(self, node: ast.AST, kinds: tuple[type, ...]):
        """A Python literal (number, string, bool, or a negated number)."""
        try:
            v = ast.literal_eval(node)
        except ValueError:
            v = None
        if isinstance(v, bool) and bool not in kinds:
            v = None
        if not isinstance(v, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(node, f"expected a literal {names}; got {ast.unparse(node)!r}")
        return v

    def dtype_arg(self, node: ast.AST):
        name = self.literal(node, (str,))
        if not is_dtype_name(name):
            raise self.error(node, f"unknown dtype {name!r}")
        return dtype(name)

    def bind(self, node: ast.AST, name: str, dt) -> Var:
        if name in self.vars or name in self.buffers:
            raise self.error(node, f"name {name!r} is bound twice")
        v = Var(name, dt)
        self.vars[name] = v
        return v

    # ------------------------------------------------------------ module and function

    def module(self, tree: ast.Module) -> PrimFunc:
        sizes, funcs = [], []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                funcs.append(node)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)
                  and self.t_name(node.value) == "dynamic"):
                sizes.append(self.size(node.targets[0].id, node.value))
            else:
                raise self.error(node, "expected `NAME = T.dynamic(...)` or the kernel's def")
        if len(funcs) != 1:
            raise self.error(tree.body[-1] if tree.body else tree,
                             f"expected exactly one @T.prim_func def; got {len(funcs)}")
        return self.func(funcs[0], tuple(sizes))

    def size(self, target: str, call: ast.Call) -> Var:
        args = self.nargs(call, 1, 2)
        name = self.literal(args[0], (str,))
        if name != target:
            raise self.error(call, f"a size is assigned to {target!r} but named {name!r}")
        return self.bind(call, name, self.dtype_arg(args[1]) if len(args) > 1 else int32)

    def func(self, node: ast.FunctionDef, sizes: tuple[Var, ...]) -> PrimFunc:
        out_idx = self.decorator(node)
        params = []
        for a in node.args.args:
            if a.annotation is None or self.t_name(a.annotation) != "Tensor":
                raise self.error(a, f"parameter {a.arg!r} needs a T.Tensor(shape, dtype) "
                                    "annotation")
            params.append(self.declare(a.arg, a.annotation, a))
        self.safe_values: list = []
        body = self.body(node.body)
        return PrimFunc(node.name, tuple(params), sizes, body, out_idx, loc=self.loc(node),
                        safe_values=tuple(self.safe_values))

    def decorator(self, node: ast.FunctionDef) -> tuple[int, ...]:
        if len(node.decorator_list) != 1 or self.t_name(node.decorator_list[0]) != "prim_func":
            raise self.error(node, "the kernel's def needs exactly one @T.prim_func decorator")
        dec = node.decorator_list[0]
        if not isinstance(dec, ast.Call):
            return ()
        kw = self.kwargs(dec, {"out_idx"})
        if "out_idx" not in kw:
            return ()
        idx = self.literal(kw["out_idx"], (list, tuple))
        if not all(isinstance(i, int) for i in idx):
            raise self.error(kw["out_idx"], "out_idx must be a list of integers")
        return tuple(idx)

    def declare(self, name: str, call: ast.AST, node: ast.AST) -> Buffer:
        """A buffer from `T.Tensor(shape, dtype[, X.data][, scope=...])`."""
        if not isinstance(call, ast.Call):
            raise self.error(call, "expected T.Tensor(shape, dtype)")
        args = self.nargs(call, 2, 3)
        kw = self.kwargs(call, {"scope"})
        data = self.data_ref(args[2]) if len(args) > 2 else None
        scope = self.scope_arg(kw["scope"]) if "scope" in kw else Scope.GLOBAL
        return self.add_buffer(node, Buffer(name, self.shape(args[0]), self.dtype_arg(args[1]),
                                            scope, data))

    def add_buffer(self, node: ast.AST, b: Buffer) -> Buffer:
        if b.name in self.buffers or b.name in self.vars:
            raise self.error(node, f"name {b.name!r} is declared twice")
        self.buffers[b.name] = b
        return b

    def data_ref(self, node: ast.AST) -> Buffer:
        if not (isinstance(node, ast.Attribute) and node.attr == "data"
                and isinstance(node.value, ast.Name)):
            raise self.error(node, "expected `BUFFER.data` (the storage a view re-uses)")
        return self.buffer(node.value)

    def scope_arg(self, node: ast.AST) -> Scope:
        name = self.literal(node, (str,))
        try:
            return Scope(name)
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise self.error(node, f"unknown scope {name!r}", f"scopes: {known}") from None

    def shape(self, node: ast.AST) -> tuple:
        if not isinstance(node, ast.Tuple):
            raise self.error(node, "a shape is a tuple, e.g. (M, 128)")
        return tuple(self.expr(e) for e in node.elts)

    def buffer(self, node: ast.AST) -> Buffer:
        if isinstance(node, ast.Name) and node.id in self.buffers:
            return self.buffers[node.id]
        raise self.error(node, f"expected a buffer name; got {ast.unparse(node)!r}")

    # ------------------------------------------------------------ statements

    def body(self, nodes: list[ast.stmt]) -> tuple:
        out = []
        for n in nodes:
            s = self.stmt(n)
            if s is not None:
                out.append(s)
        return tuple(out)

    def stmt(self, n: ast.stmt):
        kind = type(n).__name__
        handler = getattr(self, "st_" + kind, None)
        if handler is None:
            raise self.error(n, f"a {kind} statement is not part of the IR text")
        return handler(n)

    def st_Pass(self, n: ast.Pass):
        return None

    def st_Assign(self, n: ast.Assign):
        if len(n.targets) != 1:
            raise self.error(n, "assign to one target at a time")
        target, value = n.targets[0], n.value
        if isinstance(target, ast.Subscript):
            buf = self.buffer(target.value)
            return Store(buf, self.indices(target), self.expr(value), loc=self.loc(n))
        if not isinstance(target, ast.Name):
            raise self.error(target, "expected a name or `buffer[indices]` on the left")
        fn = self.t_name(value) if isinstance(value, ast.Call) else None
        if fn == "Tensor":
            self.declare(target.id, value, n)
            return None
        if fn is not None and (fn in _SCOPE_BY_ALLOC or fn in ("alloc_var", "alloc_buffer")):
            zero = next((k for k in value.keywords if k.arg == "zero_fill"), None)
            fill = True
            if zero is not None:  # the initfill pass's mark, `zero_fill=False`
                fill = self.literal(zero.value, (bool,))
                value = ast.Call(value.func, value.args,
                                 [k for k in value.keywords if k is not zero])
            return Alloc(self.alloc(target.id, value, n), loc=self.loc(n), zero_fill=fill)
        e = self.expr(value)
        return Let(self.bind(target, target.id, e.dtype), e, loc=self.loc(n))

    def st_AnnAssign(self, n: ast.AnnAssign):
        dt_name = self.t_name(n.annotation)
        if not isinstance(n.target, ast.Name) or n.value is None or not is_dtype_name(dt_name):
            raise self.error(n, "expected `name: T.<dtype> = value`")
        e = self.expr(n.value)
        return Let(self.bind(n.target, n.target.id, dtype(dt_name)), e, loc=self.loc(n))

    def alloc(self, name: str, call: ast.Call, node: ast.AST) -> Buffer:
        fn = self.t_name(call)
        if fn == "alloc_var":
            self.kwargs(call, set())
            return self.add_buffer(node, Buffer(name, (), self.dtype_arg(
                self.nargs(call, 1, 1)[0]), Scope.VAR))
        args = self.nargs(call, 2, 2)
        kw = self.kwargs(call, {"scope", "data"} if fn == "alloc_buffer" else set())
        if fn == "alloc_buffer":
            if "scope" not in kw:
                raise self.error(call, "T.alloc_buffer needs scope=...")
            scope = self.scope_arg(kw["scope"])
        else:
            scope = _SCOPE_BY_ALLOC[fn]
        data = self.data_ref(kw["data"]) if "data" in kw else None
        return self.add_buffer(node, Buffer(name, self.shape(args[0]),
                                            self.dtype_arg(args[1]), scope, data))

    def st_Expr(self, n: ast.Expr):
        call = n.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "breakpoint" and not call.args and not call.keywords):
            return Breakpoint(loc=self.loc(n))
        fn = self.t_name(call) if isinstance(call, ast.Call) else None
        if fn in _FORMS:
            return self.tile_form(call, *_FORMS[fn], self.loc(n))
        handler = getattr(self, "tile_" + fn, None) if fn else None
        if handler is None:
            raise self.error(n, "expected a tile operation (T.copy, T.gemm, ...) statement")
        return handler(call, self.loc(n))

    def tile_form(self, c: ast.Call, cls, kind, loc: Loc):
        """A tile op in its table form (ir/tileops.py: Form)."""
        form = STMTS[cls].form
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        values = {"kind": kind} if kind is not None else {}
        for field, node in zip(form.args, self.nargs(c, len(form.args), len(form.args))):
            t = types[field]
            values[field] = (self.region(node) if t == "Region" else
                             self.expr(node) if t == "Expr" else self.operand(node))
        kw = self.kwargs(c, {k for k, _, _ in form.options})
        for key, field, default in form.options:
            if key in kw:
                values[field] = self.literal(kw[key], (type(default),) if default is not
                                             REQUIRED else (int,))
            elif default is REQUIRED:
                name = STMTS[cls].surface.format(kind=kind or "")
                raise self.error(c, f"{name} needs {key}=...")
            else:
                values[field] = default
        return cls(**values, loc=loc)

    def tile_annotate_safe_value(self, c: ast.Call, loc: Loc):
        """`T.annotate_safe_value({X: v})`: what out-of-range loads of X give."""
        arg = self.nargs(c, 1, 1)[0]
        if not isinstance(arg, ast.Dict):
            raise self.error(c, "expected T.annotate_safe_value({buffer: value, ...})")
        for k, v in zip(arg.keys, arg.values):
            if (isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                    and v.func.id == "float" and len(v.args) == 1):
                value = float(self.literal(v.args[0], (str,)))
            else:
                value = self.literal(v, (int, float))
            self.safe_values.append((self.buffer(k).name, value))
        return None

    def tile_fill(self, c: ast.Call, loc: Loc):
        self.kwargs(c, set())
        dst, value = self.nargs(c, 2, 2)
        return Fill(self.region(dst), self.expr(value), loc=loc)

    def tile_clear(self, c: ast.Call, loc: Loc):
        self.kwargs(c, set())
        dst = self.region(self.nargs(c, 1, 1)[0])
        return Fill(dst, Const(0, dst.dtype), loc=loc)

    def tile_print(self, c: ast.Call, loc: Loc):
        kw = self.kwargs(c, {"msg"})
        msg = self.literal(kw["msg"], (str,)) if "msg" in kw else ""
        args = tuple(self.buffers[a.id] if isinstance(a, ast.Name) and a.id in self.buffers
                     else self.expr(a) for a in c.args)
        return Print(msg, args, loc=loc)

    def st_For(self, n: ast.For):
        it = n.iter
        fn = self.t_name(it) if isinstance(it, ast.Call) else None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            fn = "serial"
        if fn not in _KIND_BY_NAME or not isinstance(n.target, ast.Name) or n.orelse:
            raise self.error(n, "expected `for i in T.serial/Parallel/Pipelined/unroll(...)`")
        kw = self.kwargs(it, {"num_stages", "dtype"})
        args = [self.expr(a) for a in self.nargs(it, 1, 3)]
        one, zero = Const(1, int32), Const(0, int32)
        start, stop, step = (zero, args[0], one) if len(args) == 1 else (*args, one)[:3]
        stages = self.literal(kw["num_stages"], (int,)) if "num_stages" in kw else 0
        dt = self.dtype_arg(kw["dtype"]) if "dtype" in kw else int32
        var = self.bind(n.target, n.target.id, dt)
        return For(var, start, stop, step, _KIND_BY_NAME[fn], self.body(n.body), stages,
                   loc=self.loc(n))

    def st_If(self, n: ast.If):
        if isinstance(n.test, ast.Call) and self.t_name(n.test) == "versioned":
            return self.versioned(n)
        cond = self.expr(n.test)
        return If(cond, self.body(n.body), self.body(n.orelse), loc=self.loc(n))

    def versioned(self, n: ast.If) -> Versioned:
        """`if T.versioned(cond, apart=[(A, B), ...], inbounds=[A[i, j], B[0:4, k:k + 8]],
        by="pass"): body else: fallback`."""
        call = n.test
        (cond,) = self.nargs(call, 1, 1)
        kw = self.kwargs(call, {"apart", "inbounds", "by"})
        pairs = kw.get("apart")
        if not isinstance(pairs, ast.List) or not all(
                isinstance(p, ast.Tuple) and len(p.elts) == 2 for p in pairs.elts):
            raise self.error(call, "expected apart=[(A, B), ...]")
        apart = tuple((self.buffer(p.elts[0]), self.buffer(p.elts[1])) for p in pairs.elts)
        by = self.literal(kw["by"], (str,)) if "by" in kw else ""
        accesses = kw.get("inbounds", ast.List(elts=[]))
        if not isinstance(accesses, ast.List):
            raise self.error(call, "expected inbounds=[A[i, j], B[a:b, c:d], ...]")
        before = dict(self.vars), dict(self.buffers)
        body = self.body(n.body)  # the two versions may bind the same names: one runs
        bound = dict(self.vars), dict(self.buffers)
        self.vars, self.buffers = dict(before[0]), dict(before[1])
        fallback = self.body(n.orelse)
        self.vars.update(bound[0])
        self.buffers.update(bound[1])
        inbounds = tuple(self.access(x) for x in accesses.elts)  # the body's names
        return Versioned(self.expr(cond), apart, body, fallback, by, inbounds, loc=self.loc(n))

    def access(self, node: ast.AST):
        """An element access `A[i, j]` (a Load) or a region `A[a:b, c:d]` / `A`."""
        if isinstance(node, ast.Name) or isinstance(node, ast.Subscript) and any(
                isinstance(x, ast.Slice) for x in (
                    node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice])):
            return self.region(node)
        e = self.expr(node)
        if not isinstance(e, Load):
            raise self.error(node, f"expected an element access or a region; got "
                                   f"{ast.unparse(node)!r}")
        return e

    def st_Assert(self, n: ast.Assert):
        msg = "" if n.msg is None else self.literal(n.msg, (str,))
        return Assert(self.expr(n.test), msg, loc=self.loc(n))

    def st_While(self, n: ast.While):
        if n.orelse:
            raise self.error(n, "`while ... else` is not part of the IR")
        return While(self.expr(n.test), self.body(n.body), loc=self.loc(n))

    def st_With(self, n: ast.With):
        item = n.items[0] if len(n.items) == 1 else None
        if item is None or self.t_name(item.context_expr) != "Kernel":
            raise self.error(n, "expected `with T.Kernel(...) as (bx, ...)`")
        call = item.context_expr
        kw = self.kwargs(call, {"threads"})
        threads = self.literal(kw["threads"], (int, tuple)) if "threads" in kw else ()
        threads = (threads,) if isinstance(threads, int) else tuple(threads)
        grid = tuple(self.expr(a) for a in call.args)
        target = item.optional_vars
        names = [] if target is None else target.elts if isinstance(target, ast.Tuple) else [target]
        if not all(isinstance(t, ast.Name) for t in names):
            raise self.error(n, "block variables must be plain names")
        bvars = tuple(self.bind(t, t.id, int32) for t in names)
        return Launch(grid, bvars, threads, self.body(n.body), loc=self.loc(n))

    # ------------------------------------------------------------ regions and expressions

    def region(self, node: ast.AST) -> Region:
        if isinstance(node, ast.Name):
            return full_region(self.buffer(node))
        if not isinstance(node, ast.Subscript):
            raise self.error(node, f"expected a buffer region; got {ast.unparse(node)!r}")
        buf = self.buffer(node.value)
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if not all(isinstance(s, ast.Slice) and s.step is None and s.lower and s.upper
                   for s in items):
            raise self.error(node, "a region is `A[a:b, c:d]`: every index a start:stop slice")
        starts, extents = [], []
        for s in items:
            starts.append(self.expr(s.lower))
            extents.append(self.extent(s.lower, s.upper))
        return Region(buf, tuple(starts), tuple(extents))

    def extent(self, lower: ast.AST, upper: ast.AST):
        """`0:e` gives e; `s:s + e` gives e; otherwise `upper - lower`."""
        if isinstance(lower, ast.Constant) and lower.value == 0 and type(lower.value) is int:
            return self.expr(upper)
        if (isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add)
                and ast.dump(upper.left) == ast.dump(lower)):
            return self.expr(upper.right)
        return self.call(Op.SUB, (self.expr(upper), self.expr(lower)), upper)

    def operand(self, node: ast.AST):
        """A region (`A`, `A[a:b]`) or a scalar expression, as atomic_add's value takes."""
        if isinstance(node, ast.Name) and node.id in self.buffers:
            return self.region(node)
        if isinstance(node, ast.Subscript) and self.is_region_subscript(node):
            return self.region(node)
        return self.expr(node)

    def is_region_subscript(self, node: ast.Subscript) -> bool:
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        return bool(items) and all(isinstance(s, ast.Slice) for s in items)

    def indices(self, node: ast.Subscript) -> tuple:
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if any(isinstance(s, ast.Slice) for s in items):
            raise self.error(node, "a scalar access takes indices, not slices")
        return tuple(self.expr(i) for i in items)

    def expr(self, node: ast.AST):
        handler = getattr(self, "ex_" + type(node).__name__, None)
        if handler is None:
            raise self.error(node, f"not an IR expression: {ast.unparse(node)!r}")
        return handler(node)

    def ex_Constant(self, node: ast.Constant):
        v = node.value
        if type(v) not in P.DEFAULT_LITERAL:
            raise self.error(node, f"not an IR literal: {v!r}")
        return Const(v, P.DEFAULT_LITERAL[type(v)])

    def ex_Name(self, node: ast.Name):
        if node.id in self.vars:
            return self.vars[node.id]
        if node.id in self.buffers:
            raise self.error(node, f"buffer {node.id!r} used as a scalar",
                             f"index it: {node.id}[...]")
        raise self.error(node, f"unknown name {node.id!r}")

    def ex_Subscript(self, node: ast.Subscript):
        return Load(self.buffer(node.value), self.indices(node))

    def ex_UnaryOp(self, node: ast.UnaryOp):
        sym = _AST_SYMBOL.get(type(node.op))
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            v = node.operand.value
            if type(v) in (int, float):
                return Const(-v, P.DEFAULT_LITERAL[type(v)])
        if sym not in _UNARY_BY_SYMBOL:
            raise self.error(node, f"operator {ast.unparse(node)!r} is not part of the IR")
        return self.call(_UNARY_BY_SYMBOL[sym], (self.expr(node.operand),), node)

    def ex_BinOp(self, node: ast.BinOp):
        op = _BY_SYMBOL[_AST_SYMBOL[type(node.op)]] if type(node.op) in _AST_SYMBOL else None
        if op is None:
            raise self.error(node, f"operator in {ast.unparse(node)!r} is not part of the IR")
        return self.call(op, (self.expr(node.left), self.expr(node.right)), node)

    def ex_Compare(self, node: ast.Compare):
        if len(node.ops) != 1:
            raise self.error(node, "chained comparisons are not part of the IR",
                             "write (a < b) and (b < c)")
        op = _BY_SYMBOL[_AST_SYMBOL[type(node.ops[0])]]
        return self.call(op, (self.expr(node.left), self.expr(node.comparators[0])), node)

    def ex_BoolOp(self, node: ast.BoolOp):
        op = _BY_SYMBOL[_AST_SYMBOL[type(node.op)]]
        acc = self.expr(node.values[0])
        for v in node.values[1:]:
            acc = self.call(op, (acc, self.expr(v)), node)
        return acc

    def ex_Call(self, node: ast.Call):
        fn = self.t_name(node)
        if fn is not None and is_dtype_name(fn) and fn == dtype(fn).name:
            return self.typed_const(node, dtype(fn))
        if fn in ("cast", "reinterpret"):
            return self.cast(node, fn)
        if fn in _FUNC_BY_NAME:
            self.kwargs(node, set())
            return self.call(_FUNC_BY_NAME[fn], tuple(self.expr(a) for a in node.args), node)
        raise self.error(node, f"unknown function {ast.unparse(node.func)!r}")

    def typed_const(self, node: ast.Call, dt):
        self.kwargs(node, set())
        arg = self.nargs(node, 1, 1)[0]
        v = self.literal(arg, (bool, int, float, str))
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise self.error(arg, f"not a number: {v!r}") from None
        return Const(v, dt)

    def cast(self, node: ast.Call, fn: str):
        x, target = self.nargs(node, 2, 2)
        kw = self.kwargs(node, {"saturate"} if fn == "cast" else set())
        sat = self.literal(kw["saturate"], (bool,)) if "saturate" in kw else False
        op = Op.REINTERPRET if fn == "reinterpret" else Op.CAST_SAT if sat else Op.CAST
        return Call(op, (self.expr(x),), self.dtype_arg(target))

    def call(self, op: Op, args: tuple, node: ast.AST) -> Call:
        try:
            dt = result_dtype(op, tuple(a.dtype for a in args))
        except TileTypeError as e:
            raise self.error(node, e.message, e.hint) from None
        return Call(op, args, dt)
