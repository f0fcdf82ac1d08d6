"""Translating Python expressions inside a kernel into front-end values.

Build-time values are computed in Python (so `block_M * 2` or `T.ceildiv(K, 32)` on ints
fold away); anything involving runtime scalars becomes IR through frontend/exprs.py.
Statements live in translate.py; tile-language calls in builtins.py.
"""

from __future__ import annotations

import ast
import operator
import types

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.comprehensions import comprehension
from tilepy.frontend.dtypes import as_format, dtype
from tilepy.frontend.macro import inline_macro
from tilepy.frontend.surface import SizeExpr, SymbolicSize
from tilepy.frontend.traced import Traced
from tilepy.frontend.values import DataRef, PointeeView, StartPoint, describe
from tilepy.ir.expr import Buffer, Const, Load, Region
from tilepy.ir.ops import Op
from tilepy.ir.printer import format_expr
from tilepy.ir.types import Scope, int32

_BINOPS = {
    ast.Add: (Op.ADD, operator.add), ast.Sub: (Op.SUB, operator.sub),
    ast.Mult: (Op.MUL, operator.mul), ast.Div: (Op.DIV, operator.truediv),
    ast.FloorDiv: (Op.FLOORDIV, operator.floordiv), ast.Mod: (Op.MOD, operator.mod),
    ast.Pow: (Op.POW, operator.pow), ast.BitAnd: (Op.BITAND, operator.and_),
    ast.BitOr: (Op.BITOR, operator.or_), ast.BitXor: (Op.BITXOR, operator.xor),
    ast.LShift: (Op.SHL, operator.lshift), ast.RShift: (Op.SHR, operator.rshift),
}
_CMPOPS = {
    ast.Eq: (Op.EQ, operator.eq), ast.NotEq: (Op.NE, operator.ne),
    ast.Lt: (Op.LT, operator.lt), ast.LtE: (Op.LE, operator.le),
    ast.Gt: (Op.GT, operator.gt), ast.GtE: (Op.GE, operator.ge),
}


_IDENTITY = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
             ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


class ExpressionMixin:
    """The expression half of the Translator (which provides lookup, loc and builtins)."""

    def expr(self, node: ast.expr):
        method = getattr(self, "_e_" + type(node).__name__, None)
        if method is None:
            raise TileSyntaxError(
                f"{type(node).__name__} expressions are not supported in a kernel",
                self.loc(node))
        v = method(node)
        if isinstance(v, Traced):  # a comprehension's runtime element, or Python on them
            v = v.expr
        return self.scalar_view(v, node)

    def scalar_view(self, v, node):
        """A `T.alloc_var` buffer named in an expression reads its value."""
        if isinstance(v, Buffer) and v.scope is Scope.VAR:
            return Load(v, ())
        return v

    def value(self, node: ast.expr):
        """Like expr(), but a var buffer stays a buffer (for stores and tile operands)."""
        method = getattr(self, "_e_" + type(node).__name__, None)
        if method is None:
            return self.expr(node)
        return method(node)

    # ------------------------------------------------------------ leaves
    def _e_Constant(self, node):
        return node.value

    def _e_Name(self, node):
        return self.lookup(node.id, self.loc(node))

    def _e_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    _e_List = _e_Tuple

    def _e_ListComp(self, node):
        return comprehension(self, node, self.loc(node))

    _e_SetComp = _e_DictComp = _e_GeneratorExp = _e_ListComp

    def _e_JoinedStr(self, node):
        raise TileSyntaxError("f-strings are only supported inside print()", self.loc(node))

    def _e_Attribute(self, node):
        base = self.value(node.value)
        loc = self.loc(node)
        if isinstance(base, Buffer):
            return self._buffer_attribute(base, node.attr, loc)
        if exprs.is_ir(base) and node.attr in ("dtype", "astype"):
            got = getattr(Traced(base, loc), node.attr)  # TVM's x.dtype, x.astype(dt)
            return got if node.attr == "dtype" else (lambda dt: got(dt).expr)
        try:
            return getattr(base, node.attr)
        except AttributeError:
            if isinstance(base, types.ModuleType):
                raise _missing_name(node, base, loc) from None
            raise TileSyntaxError(f"{describe(base)} has no attribute {node.attr!r}",
                                  loc) from None

    def _buffer_attribute(self, buf: Buffer, attr: str, loc: Loc):
        if attr == "shape":
            return tuple(int(s.value) if isinstance(s, Const) else s for s in buf.shape)
        if attr == "dtype":  # TileLang's: a string ("float16" == A.dtype)
            return dtype(buf.dtype.name)
        if attr == "data":
            return DataRef(buf)
        if attr == "ndim":
            return buf.ndim
        raise TileSyntaxError(f"a buffer has no attribute {attr!r}", loc,
                              hint="buffers have .shape, .dtype, .ndim and .data")

    # ------------------------------------------------------------ operators
    def _e_BinOp(self, node):
        op, py = _BINOPS[type(node.op)]
        a, b = self.expr(node.left), self.expr(node.right)
        loc = self.loc(node)
        if not exprs.is_ir(a) and not exprs.is_ir(b):
            return self.build_time(lambda: py(a, b), loc)
        return exprs.call(op, [a, b], loc)

    def _e_UnaryOp(self, node):
        v = self.expr(node.operand)
        loc = self.loc(node)
        if not exprs.is_ir(v):
            ops = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                   ast.Not: operator.not_, ast.Invert: operator.invert}
            return self.build_time(lambda: ops[type(node.op)](v), loc)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return exprs.call(Op.NOT, [exprs.as_bool(v, loc)], loc)
        op = Op.NEG if isinstance(node.op, ast.USub) else Op.BITNOT
        return exprs.call(op, [v], loc)

    def _e_Compare(self, node):
        loc = self.loc(node)
        left = self.expr(node.left)
        result = None
        for cmp, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            if type(cmp) in _IDENTITY:  # on the build-time objects, as Python (and TileLang)
                part = _IDENTITY[type(cmp)](left, right)
                result = part if result is None else self._and(result, part, loc)
                left = right
                continue
            if type(cmp) not in _CMPOPS:
                raise TileSyntaxError(f"the comparison {type(cmp).__name__} is not supported "
                                      "in a kernel", loc)
            op, py = _CMPOPS[type(cmp)]
            if not exprs.is_ir(left) and not exprs.is_ir(right):
                part = py(left, right)
            else:
                part = exprs.call(op, [left, right], loc)
            result = part if result is None else self._and(result, part, loc)
            left = right
        return result

    def _and(self, a, b, loc):
        if not exprs.is_ir(a) and not exprs.is_ir(b):
            return a and b
        if not exprs.is_ir(a):
            return b if a else False
        if not exprs.is_ir(b):
            return a if b else False
        return exprs.call(Op.AND, [exprs.as_bool(a, loc), exprs.as_bool(b, loc)], loc)

    def _e_BoolOp(self, node):
        loc = self.loc(node)
        values = [self.expr(v) for v in node.values]
        result = values[0]
        for v in values[1:]:
            if isinstance(node.op, ast.And):
                result = self._and(result, v, loc)
            elif not exprs.is_ir(result) and not exprs.is_ir(v):
                result = result or v
            else:
                result = exprs.call(Op.OR, [exprs.as_bool(result, loc),
                                            exprs.as_bool(v, loc)], loc)
        return result

    def _e_IfExp(self, node):
        cond = self.expr(node.test)
        loc = self.loc(node)
        if not exprs.is_ir(cond):
            return self.expr(node.body) if cond else self.expr(node.orelse)
        a, b = self.expr(node.body), self.expr(node.orelse)
        return exprs.call(Op.SELECT, [exprs.as_bool(cond, loc), a, b], loc)

    # ------------------------------------------------------------ subscripts
    def _e_Subscript(self, node):
        base = self.value(node.value)
        loc = self.loc(node)
        if isinstance(base, Buffer):
            return self.buffer_subscript(base, node.slice, loc)
        if isinstance(base, PointeeView):
            return self.buffer_subscript(base.buffer, node.slice, loc, (base.index,))
        index = self.expr(node.slice)
        if exprs.is_ir(index):
            raise TileTypeError(f"cannot index {describe(base)} with a runtime value", loc)
        return self.build_time(lambda: base[index], loc)

    def buffer_subscript(self, buf: Buffer, index_node: ast.expr, loc: Loc, prefix=()):
        """`buf[...]`: a Load for scalar indices, a Region when any index is a slice;
        `prefix`: leading indices already chosen (a T.make_tensor view's table entry)."""
        items = index_node.elts if isinstance(index_node, ast.Tuple) else [index_node]
        if buf.scope is Scope.VAR:
            if len(items) == 1 and self.expr(items[0]) == 0:
                return Load(buf, ())
            raise TileTypeError(f"{buf.name} is a scalar variable: index it with [0]", loc)
        flat = list(prefix)
        for it in items:
            v = it if isinstance(it, ast.Slice) else self.expr(it)
            flat.extend(v if isinstance(v, tuple) else (v,))
        if len(flat) != buf.ndim:
            raise TileTypeError(
                f"{buf.name} has {buf.ndim} dimension(s) but {len(flat)} index(es) were given",
                loc, hint=f"{buf.name} has shape {self.shape_text(buf)}")
        if not any(isinstance(v, ast.Slice) for v in flat):
            return Load(buf, tuple(exprs.index_expr(v, loc) for v in flat))
        return self.slice_region(buf, flat, loc)

    def slice_region(self, buf: Buffer, items: list, loc: Loc) -> Region:
        starts, extents = [], []
        one = Const(1, int32)
        for dim, it in zip(buf.shape, items):
            if not isinstance(it, ast.Slice):
                starts.append(exprs.index_expr(it, loc))
                extents.append(one)
                continue
            if it.step is not None:
                raise TileSyntaxError("slices with a step are not supported", loc,
                                      hint="copy element by element in a T.Parallel loop, "
                                           "e.g. t[i] = X[2 * i]")
            lo = exprs.index_expr(self.expr(it.lower), loc) if it.lower else Const(0, int32)
            hi = exprs.index_expr(self.expr(it.upper), loc) if it.upper else dim
            starts.append(lo)
            extents.append(exprs.simplify_sub(hi, lo, loc))
        return Region(buf, tuple(starts), tuple(extents))

    def operand(self, node: ast.expr):
        """A tile-op operand: a whole buffer, a slice region, or a start point."""
        if isinstance(node, ast.Subscript):
            base, prefix = self.value(node.value), ()
            if isinstance(base, PointeeView):
                base, prefix = base.buffer, (base.index,)
            if isinstance(base, Buffer):
                v = self.buffer_subscript(base, node.slice, self.loc(node), prefix)
                if isinstance(v, Load):
                    return StartPoint(base, v.indices)
                return v
        v = self.value(node)
        if isinstance(v, PointeeView):  # the whole pointee: its entry of the stacked buffer
            return self.slice_region(v.buffer, [v.index] + [ast.Slice()] * (v.buffer.ndim - 1),
                                     self.loc(node))
        return v

    def shape_text(self, buf: Buffer) -> str:
        return "(" + ", ".join(format_expr(s) for s in buf.shape) + ")"

    # ------------------------------------------------------------ calls
    def _e_Call(self, node):
        fn = self.value(node.func)
        loc = self.loc(node)
        handled, result = self.call_builtin(fn, node, loc)
        if handled:
            return result
        if as_format(fn) is not None:  # T.float32(x): a cast
            fn = as_format(fn)
            (arg,) = [self.expr(a) for a in node.args]
            return exprs.cast(exprs.to_ir(arg, loc, like=fn), fn, loc)
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
        if getattr(fn, "__tilepy_macro__", False):
            return inline_macro(self, fn, args, kwargs, loc)
        if any(exprs.is_ir(a) for a in list(args) + list(kwargs.values())):
            return self.call_python_on_ir(fn, args, kwargs, node, loc)
        out = self.build_time(lambda: fn(*args, **kwargs), loc)
        if isinstance(out, (SymbolicSize, SizeExpr)):  # T.symbolic("n") in the body
            return self.size_expr(out, loc)
        return out

    def build_time(self, thunk, loc: Loc):
        """Run Python code on build-time values; its errors point at the kernel line."""
        try:
            return thunk()
        except (TileSyntaxError, TileTypeError):
            raise
        except Exception as err:  # noqa: BLE001 - any user error becomes a located one
            raise TileSyntaxError(f"{type(err).__name__}: {err}", loc) from None


def _missing_name(node: ast.Attribute, module: types.ModuleType, loc: Loc) -> TileSyntaxError:
    """`T.sync_grid` where the module (the tile language, tvm.tir...) lacks the name."""
    spelled = f"{ast.unparse(node.value)}.{node.attr}"
    return TileSyntaxError(
        f"{spelled}: expected a name of {module.__name__.removeprefix('tilepy.compat.')}; "
        f"it has no {node.attr!r}", loc,
        hint="tilepy has TileLang's portable names (docs/language.md, \"TileLang's "
             "spellings\"); this one is not among them yet")
