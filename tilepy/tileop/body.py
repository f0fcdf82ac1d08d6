"""A tile op's body -> index expressions: one IR expression per output over the output's
index names (`i, j`), with each reduction (`sum/max/min(... for k in range(K))`) replaced by
a placeholder variable and recorded as a `Red`.

Expressions are typed by the op table through the front end's expression builder; this
module only checks what a tile op adds (index names, reductions, shapes of accesses).
"""

from __future__ import annotations

import ast
import builtins as py
from dataclasses import dataclass, field

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend import builtins as tile_builtins
from tilepy.frontend import exprs
from tilepy.frontend.expressions import ExpressionMixin
from tilepy.frontend.source import Source
from tilepy.frontend.surface import Builtin, SizeExpr, SymbolicSize
from tilepy.frontend.traced import call_traced
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Var
from tilepy.ir.ops import FUNCTIONS, Op
from tilepy.ir.printer import format_expr
from tilepy.ir.stmt import ReduceKind
from tilepy.ir.types import DType, float32, int32
from tilepy.tileop.spec import Signature, size_expr

INDEX_NAMES = ("i", "j", "l", "m", "n", "p")  # an output's index names, dim by dim
_SCALAR = set(FUNCTIONS) | {"if_then_else", "cast", "reinterpret", "infinity", "ceildiv"}
_KINDS = {py.sum: ReduceKind.SUM, py.max: ReduceKind.MAX, py.min: ReduceKind.MIN}


@dataclass(frozen=True)
class Red:
    """One reduction: `out` (a placeholder of the accumulator's dtype) is the fold of `body`
    over `var` in [0, extent), ascending, from the kind's identity (numerics contract 4)."""

    out: Var
    kind: ReduceKind
    var: Var
    extent: Expr
    body: Expr
    loc: Loc = field(compare=False)
    name: str = field(default="", compare=False)  # the variable as the user wrote it
    parts: tuple = field(default=(), compare=False)  # each `for` variable, from `var`
    part_extents: tuple = field(default=(), compare=False)  # and its range


@dataclass
class OpBody:
    """What a tile op computes: per output, an expression over `index` (name -> Var, with
    its extent in `extents`) and the reductions' placeholders."""

    name: str
    sig: Signature
    outs: list[Expr]
    reds: list[Red]
    index: dict[str, Var]
    extents: dict[str, Expr]  # index or reduction variable name -> extent
    out_locs: list[Loc]

    def red(self, v: Var) -> Red | None:
        return next((r for r in self.reds if r.out == v), None)


def widened(dt: DType) -> DType:
    """A sum's default accumulator: float32 for narrower floats, int32 for narrower ints."""
    if dt.is_float:
        return float32 if dt.bits < 32 else dt
    return int32 if dt.bits < 32 else dt


class BodyTranslator(ExpressionMixin):
    """Builds an OpBody from the function's AST (statements: `name = expr`, `return`)."""

    def __init__(self, src: Source, env: dict, sig: Signature, index: tuple[str, ...],
                 accum: DType | None):
        self.src, self.env, self.sig, self.accum = src, env, sig, accum
        self.locals: dict[str, Expr] = {}
        self.params = {b.name: b for b in sig.params}
        rank = max(len(b.shape) for b in sig.outputs)
        names = index if index else INDEX_NAMES[:rank]
        if len(names) < rank:
            raise TileSyntaxError(f"{len(names)} index names for an output of rank {rank}",
                                  src.loc(src.fn_def))
        self.index = {n: Var(n, int32) for n in names[:rank]}
        self.extents: dict[str, Expr] = {}
        for out, loc in zip(sig.outputs, sig.output_locs):
            for n, dim in zip(names, out.shape):
                if self.extents.setdefault(n, dim) != dim:
                    raise TileTypeError(
                        f"the outputs disagree on the size of index {n}: "
                        f"{format_expr(self.extents[n])} and {format_expr(dim)}", loc,
                        hint="outputs share index names dim by dim (i, j, ...)")
        self.scope: dict[str, Var] = {}  # reduction variables in scope
        self.reds: list[Red] = []
        self.taken = set(self.index) | set(self.params)

    # ------------------------------------------------------------ what the mixin needs
    def loc(self, node: ast.AST) -> Loc:
        return self.src.loc(node)

    def lookup(self, name: str, loc: Loc):
        for table in (self.scope, self.locals, self.index, self.params):
            if name in table:
                return table[name]
        if name in self.env:
            value = self.env[name]
            if isinstance(value, (SymbolicSize, SizeExpr)):
                return self.size_expr(value, loc)
            return value
        bound = ", ".join([*self.index, *self.scope])
        raise TileSyntaxError(
            f"the index or name {name!r} is never bound (indices here: {bound})", loc,
            hint="an index is one of the output's index names or a reduction's variable "
                 "(`for k in range(K)` inside sum/max/min)")

    def size_expr(self, s, loc: Loc):
        return size_expr(s, self.sig.sizes, loc, bind=False)

    def call_builtin(self, fn, node: ast.Call, loc: Loc):
        if isinstance(fn, Builtin):
            if fn.name not in _SCALAR:
                raise TileSyntaxError(
                    f"T.{fn.name} cannot be used in a tile op: its body is an index "
                    "expression", loc, hint="use scalar ops (T.exp, T.max, T.cast, ...) and "
                    "sum/max/min(... for k in range(K)); write tile statements in a "
                    "@T.prim_func kernel")
            return tile_builtins.call_builtin(self, fn, node, loc)
        if fn in _KINDS and node.args and isinstance(node.args[0], ast.GeneratorExp):
            return True, self.reduction(_KINDS[fn], node, loc)
        return False, None

    def call_python_on_ir(self, fn, args, kwargs, node, loc):
        if fn in (py.min, py.max) and len(args) >= 2 and not kwargs:
            out = args[0]
            for a in args[1:]:
                out = exprs.call(Op.MIN if fn is py.min else Op.MAX, [out, a], loc)
            return out
        if fn is py.abs and len(args) == 1:
            return exprs.call(Op.ABS, [args[0]], loc)
        if fn in (py.int, py.float) and len(args) == 1:
            return exprs.cast(args[0], int32 if fn is py.int else float32, loc)
        if callable(fn):
            return self.build_time(lambda: call_traced(fn, args, kwargs, loc), loc)
        raise TileTypeError(f"{fn!r} is not callable", loc)

    def _e_GeneratorExp(self, node):
        raise TileSyntaxError("a generator is only allowed as the argument of sum, max or min",
                              self.loc(node), hint="sum(a[i, k] for k in range(K))")

    def _e_Subscript(self, node):
        base = self.value(node.value)
        if not isinstance(base, Buffer):
            return super()._e_Subscript(node)
        loc = self.loc(node)
        if any(isinstance(n, ast.Slice) for n in ast.walk(node.slice)):
            raise TileSyntaxError("slices are not supported in a tile op body", loc,
                                  hint="index every dimension with an index name")
        load = self.buffer_subscript(base, node.slice, loc)
        self.check_access(load, loc)
        return load

    # ------------------------------------------------------------ tile-op rules
    def check_access(self, load: Load, loc: Loc) -> None:
        """An index that is an index name must run over the dimension's size. Accesses
        whose indices are all distinct index names or constants are tiles; any other
        (`x[i + r, c]`, `x[i, label[i]]`) reads elements, 0 outside the tensor."""
        for dim, (ix, size) in enumerate(zip(load.indices, load.buffer.shape)):
            if not (isinstance(ix, Var) and ix.name in self.extents):
                continue
            want = self.extents[ix.name]
            if want != size:
                raise TileTypeError(
                    f"{load.buffer.name}: the index {self.user_name(ix)} runs over "
                    f"{format_expr(want)}, but dimension {dim} of {load.buffer.name} has "
                    f"size {format_expr(size)}", loc,
                    hint="index each dimension with an index of its size (broadcast with a "
                         "constant index 0)")

    def user_name(self, v: Var) -> str:
        return next((n for n, x in self.scope.items() if x == v), v.name)

    def reduction(self, kind: ReduceKind, node: ast.Call, loc: Loc) -> Var:
        gen: ast.GeneratorExp = node.args[0]  # type: ignore[assignment]
        if len(node.args) != 1 or node.keywords:
            raise TileSyntaxError("a reduction takes one generator", loc,
                                  hint="sum(a[i, k] * b[k, j] for k in range(K))")
        ranges = [self.reduction_range(comp, loc) for comp in gen.generators]
        names = [n for n, _ in ranges]
        var, extent, parts = self.bind_generators(ranges, loc)
        try:
            body = exprs.to_ir(self.expr(gen.elt), self.loc(gen.elt))
            for comp in gen.generators:
                for cond in comp.ifs:  # a filter: skipped elements fold the identity
                    keep = exprs.as_bool(self.expr(cond), self.loc(cond))
                    body = Call(Op.SELECT, (keep, body, self.identity(kind, body.dtype, loc)),
                                body.dtype, loc)
        finally:
            for name in names:
                del self.scope[name]
        acc = body.dtype
        if kind is ReduceKind.SUM:
            acc = self.accum or widened(body.dtype)
            body = _in_accumulator(body, acc, loc)
        out = Var(f"__r{len(self.reds)}", acc)
        self.reds.append(Red(out, kind, var, extent, body, loc, "_".join(names), parts,
                             tuple(e for _, e in ranges)))
        return out

    def bind_generators(self, ranges: list, loc: Loc):
        """One variable over the product of the ranges; each `for` name is bound to its
        digit of it, the last fastest (row-major): (variable, extent, the digits)."""
        names = [n for n, _ in ranges]
        var = Var(self.fresh("_".join(names)), int32)
        extent = ranges[0][1]
        for _, e in ranges[1:]:
            extent = exprs.call(Op.MUL, [extent, e], loc)
        self.extents[var.name] = extent
        one = Const(1, int32)
        stride: Expr = one
        for name, e in reversed(ranges):
            pos = var if stride == one else exprs.call(Op.FLOORDIV, [var, stride], loc)
            self.scope[name] = pos if name == names[0] else exprs.call(Op.MOD, [pos, e], loc)
            stride = e if stride == one else exprs.call(Op.MUL, [stride, e], loc)
        return var, extent, tuple(self.scope[n] for n in names)

    def identity(self, kind: ReduceKind, dt: DType, loc: Loc) -> Const:
        from tilepy.ir.tileops import reduce_identity

        return exprs.make_const(reduce_identity(kind, dt), dt, loc)

    def reduction_range(self, comp: ast.comprehension, loc: Loc) -> tuple[str, Expr]:
        it = comp.iter
        ok = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
            it.func.id == "range" and len(it.args) == 1 and not it.keywords
        if not ok or not isinstance(comp.target, ast.Name) or comp.is_async:
            raise TileSyntaxError("a reduction runs `for k in range(K)`", self.loc(comp.iter),
                                  hint="sum(x[i, k] for k in range(K))")
        name = comp.target.id
        if name in self.scope or name in self.index or name in self.locals or \
                name in self.params:
            raise TileSyntaxError(f"the reduction variable {name} is already an index here",
                                  self.loc(comp.target), hint="give it another name")
        extent = self.expr(it.args[0])
        return name, exprs.index_expr(extent, self.loc(it.args[0]))

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    # ------------------------------------------------------------ statements
    def translate(self) -> OpBody:
        body = self.src.fn_def.body
        for st in body[:-1]:
            self.statement(st)
        last = body[-1]
        if not isinstance(last, ast.Return) or last.value is None:
            raise TileSyntaxError("a tile op ends with `return <index expression>`",
                                  self.loc(last), hint="return sum(a[i, k] * b[k, j] "
                                                       "for k in range(K))")
        n = len(self.sig.outputs)
        nodes = last.value.elts if n > 1 and isinstance(last.value, ast.Tuple) else \
            [last.value]
        if len(nodes) != n:
            raise TileTypeError(f"the annotation declares {n} outputs; the return gives "
                                f"{len(nodes)}", self.loc(last.value))
        outs = [exprs.to_ir(self.expr(v), self.loc(v)) for v in nodes]
        locs = [self.loc(v) for v in nodes]
        result = OpBody(self.src.fn_def.name, self.sig, outs, self.reds, self.index,
                        self.extents, locs)
        for k, (e, out) in enumerate(zip(outs, self.sig.outputs)):
            self.check_output_indices(result, k, e, out, locs[k])
        return result

    def statement(self, st: ast.stmt) -> None:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            return  # a docstring
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            if name in self.index or name in self.params:
                raise TileSyntaxError(f"{name} is an index or argument name; bind another",
                                      self.loc(st))
            self.locals[name] = self.expr(st.value)
            return
        what = type(st).__name__
        raise TileSyntaxError(
            f"{what} statements are not supported in a tile op body", self.loc(st),
            hint="a tile op body is `name = <expression>` lines and one `return`; loops "
                 "are written as sum/max/min(... for k in range(K))")

    def check_output_indices(self, body: OpBody, k: int, e: Expr, out: Buffer,
                             loc: Loc) -> None:
        names = list(self.index)[:len(out.shape)]
        extra = sorted(set(free_indices(body, e)) - set(names))
        if extra:
            raise TileSyntaxError(
                f"output {k} has the indices {', '.join(names)}; its expression uses "
                f"{', '.join(extra)}, which it does not have", loc,
                hint="reduce over the other indices with sum/max/min")


def _in_accumulator(body: Expr, acc: DType, loc: Loc) -> Expr:
    """A sum's body in its accumulator's dtype. A product is computed there from its
    converted operands (as T.gemm computes a product in C's dtype), so a contraction of
    narrow inputs has exact products."""
    if isinstance(body, Call) and body.op is Op.MUL and body.dtype != acc:
        a, b = (exprs.cast(x, acc, loc) for x in body.args)
        return Call(Op.MUL, (a, b), acc, loc)
    return exprs.cast(body, acc, loc)


def free_indices(body: OpBody, e: Expr) -> list[str]:
    """The index (and reduction variable) names e depends on, through reductions."""
    out: list[str] = []

    def visit(x: Expr) -> None:
        if isinstance(x, Var):
            red = body.red(x)
            if red is not None:
                for n in free_indices(body, red.body):
                    if n != red.var.name and n not in out:
                        out.append(n)
            elif x.name in body.extents and x.name not in out:
                out.append(x.name)
        elif isinstance(x, Load):
            for ix in x.indices:
                visit(ix)
        elif isinstance(x, Call):
            for a in x.args:
                visit(a)

    visit(e)
    return out
