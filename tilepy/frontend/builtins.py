"""What each tile-language call (`T.copy`, `T.gemm`, `T.exp`, `T.alloc_shared`...) builds.

One handler per `tilepy.language` builtin, found by name in HANDLERS. Handlers check the
user's arguments (kinds, shapes, dtypes) and emit IR through the translator; the meaning of
each op stays in the op table and the statement docstrings.
"""

from __future__ import annotations

import ast
import builtins as py_builtins

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.surface import Builtin
from tilepy.frontend.values import StartPoint, describe, operand_region, region_of
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Load, Region, Var
from tilepy.ir.ops import FUNCTIONS, OPS, Op
from tilepy.ir.tileops import STMTS
from tilepy.ir.types import Scope, int32
from tilepy.ir.types import dtype as to_dtype

# T.exp(x), T.max(a, b)...: the op table's surface names (ir/ops.py FUNCTIONS), by arity
_UNARY = {name: op for name, op in FUNCTIONS.items() if OPS[op].arity == 1}
_BINARY = {name: op for name, op in FUNCTIONS.items() if OPS[op].arity == 2}
_REDUCE = {"reduce_" + k.value: k for k in S.ReduceKind}
_ALLOC = {"alloc_shared": Scope.SHARED, "alloc_fragment": Scope.FRAGMENT,
          "alloc_local": Scope.LOCAL}


class Args:
    """A call's arguments bound to a signature, evaluated lazily (operands need AST)."""

    def __init__(self, tr, node: ast.Call, names: list[str], loc: Loc, what: str):
        self.tr, self.loc = tr, loc
        self.nodes: dict[str, ast.expr] = {}
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise TileSyntaxError(f"*args are not supported in {what}", loc)
        if len(node.args) > len(names):
            raise TileTypeError(f"{what} takes at most {len(names)} positional arguments; "
                                f"got {len(node.args)}", loc)
        for name, a in zip(names, node.args):
            self.nodes[name] = a
        for k in node.keywords:
            if k.arg is None:
                raise TileSyntaxError(f"**kwargs are not supported in {what}", loc)
            self.nodes[k.arg] = k.value

    def has(self, name: str) -> bool:
        return name in self.nodes

    def value(self, name: str, default=None):
        return self.tr.expr(self.nodes[name]) if name in self.nodes else default

    def operand(self, name: str):
        if name not in self.nodes:
            raise TileTypeError(f"missing argument {name!r}", self.loc)
        return self.tr.operand(self.nodes[name])

    def region(self, name: str, point_is_element: bool = False) -> Region:
        op = region_of(self.operand(name), self.loc)
        if isinstance(op, StartPoint) and point_is_element:  # `T.fill(s[0], v)`: one element
            return Region(op.buffer, op.starts, tuple(Const(1, int32) for _ in op.starts))
        return operand_region(op, None, self.loc) if isinstance(op, StartPoint) else op

    def const(self, name: str, default=None):
        v = self.value(name, default)
        if exprs.is_ir(v):
            raise TileTypeError(f"{name} must be known when the kernel is built; got a "
                                "runtime value", self.loc)
        return v


def call_builtin(tr, fn, node: ast.Call, loc: Loc):
    """(True, value) when `fn` is a tile-language or supported Python builtin."""
    if isinstance(fn, Builtin):
        handler = HANDLERS.get(fn.name)
        if handler is None:
            raise TileSyntaxError(f"T.{fn.name}(...) cannot be used in this position", loc)
        return True, handler(tr, node, loc, fn.name)
    if fn is py_builtins.print:
        return True, _print(tr, node, loc, "print")
    if fn is py_builtins.breakpoint:
        tr.emit(S.Breakpoint(loc=loc))
        return True, None
    return False, None


# ---------------------------------------------------------------- scalar ops


def _unary(tr, node, loc, name):
    a = Args(tr, node, ["x"], loc, f"T.{name}")
    x = a.value("x")
    if not exprs.is_ir(x):
        x = exprs.to_ir(x, loc)
    return exprs.call(_UNARY[name], [x], loc)


def _binary(tr, node, loc, name):
    a = Args(tr, node, ["a", "b"], loc, f"T.{name}")
    x, y = a.value("a"), a.value("b")
    if not exprs.is_ir(x) and not exprs.is_ir(y):
        return {"max": py_builtins.max, "min": py_builtins.min}.get(
            name, lambda p, q: exprs.call(_BINARY[name], [p, q], loc))(x, y)
    return exprs.call(_BINARY[name], [x, y], loc)


def _if_then_else(tr, node, loc, name):
    a = Args(tr, node, ["cond", "a", "b"], loc, "T.if_then_else")
    cond = a.value("cond")
    if not exprs.is_ir(cond):
        return a.value("a") if cond else a.value("b")
    return exprs.call(Op.SELECT, [exprs.as_bool(cond, loc), a.value("a"), a.value("b")], loc)


def _dtype_arg(v, loc: Loc):
    try:
        return to_dtype(v)
    except Exception:  # noqa: BLE001
        raise TileTypeError(f"expected a dtype; got {describe(v)}", loc) from None


def _cast(tr, node, loc, name):
    a = Args(tr, node, ["x", "dtype"], loc, f"T.{name}")
    x, dt = a.value("x"), a.value("dtype")
    if exprs.is_ir(dt) or not exprs.is_ir(x) and not exprs.is_py_scalar(x):
        x, dt = dt, x  # T.reinterpret(dtype, value) is TVM's order; accept both
    dt = _dtype_arg(dt, loc)
    x = exprs.to_ir(x, loc)
    if name == "reinterpret":
        if x.dtype.bits != dt.bits:
            raise TileTypeError(f"T.reinterpret needs dtypes of one width; {x.dtype} has "
                                f"{x.dtype.bits} bits and {dt} has {dt.bits}", loc)
        return exprs.cast(x, dt, loc, Op.REINTERPRET)
    op = Op.CAST_SAT if a.const("saturate", False) else Op.CAST
    return exprs.cast(x, dt, loc, op)


def _infinity(tr, node, loc, name):
    dt = _dtype_arg(Args(tr, node, ["dtype"], loc, "T.infinity").value("dtype"), loc)
    return exprs.make_const(float("inf"), dt, loc)


def _ceildiv(tr, node, loc, name):
    a = Args(tr, node, ["a", "b"], loc, "T.ceildiv")
    x, y = a.value("a"), a.value("b")
    if not exprs.is_ir(x) and not exprs.is_ir(y):
        return -(-x // y)
    if not exprs.is_ir(y):  # the usual case, a constant tile size: (x + (y - 1)) // y
        return exprs.call(Op.FLOORDIV, [exprs.call(Op.ADD, [x, y - 1], loc), y], loc)
    num = exprs.call(Op.SUB, [exprs.call(Op.ADD, [x, y], loc), 1], loc)
    return exprs.call(Op.FLOORDIV, [num, y], loc)


# ---------------------------------------------------------------- allocation


def _shape(tr, v, loc: Loc) -> tuple:
    items = v if isinstance(v, (tuple, list)) else (v,)
    return tuple(exprs.index_expr(s, loc) for s in items)


def _alloc(tr, node, loc, name):
    a = Args(tr, node, ["shape", "dtype", "scope"], loc, f"T.{name}")
    shape = _shape(tr, a.value("shape"), loc)
    for s in shape:
        if not isinstance(s, Const):
            raise TileTypeError(f"T.{name} needs a shape known when the kernel is built", loc,
                                hint="use Python ints or block-size parameters")
    dt = _dtype_arg(a.value("dtype", "float32"), loc)
    return tr.declare(Buffer(tr.fresh_name(), shape, dt, _ALLOC[name]), loc)


def _alloc_var(tr, node, loc, name):
    a = Args(tr, node, ["dtype", "init"], loc, "T.alloc_var")
    dt = _dtype_arg(a.value("dtype", "float32"), loc)
    buf = tr.declare(Buffer(tr.fresh_name(), (), dt, Scope.VAR), loc)
    if a.has("init"):
        tr.emit(S.Store(buf, (), exprs.to_ir(a.value("init"), loc, like=dt), loc=loc))
    return buf


# ---------------------------------------------------------------- tile ops


def _copy(tr, node, loc, name):
    a = Args(tr, node, ["src", "dst"], loc, "T.copy")
    src, dst = region_of(a.operand("src"), loc), region_of(a.operand("dst"), loc)
    src_r = operand_region(src, _extents(dst), loc)
    dst_r = operand_region(dst, src_r.extents, loc)
    _emit_checked(tr, S.Copy(src_r, dst_r, loc=loc), loc)


def _extents(op):
    return op.extents if isinstance(op, Region) else None


def _emit_checked(tr, s, loc: Loc) -> None:
    """Emit tile op s after its table entry's shape rule (ir/tileops.py), raised at the
    user's line."""
    problem = STMTS[type(s)].tile.shape(s)
    if problem is not None:
        message, hint = problem
        raise TileTypeError(message, loc, hint=hint)
    tr.emit(s)


def _gemm(tr, node, loc, name):
    a = Args(tr, node, ["A", "B", "C", "transpose_A", "transpose_B", "policy", "clear_accum"],
             loc, "T.gemm")
    A, B, C = a.region("A"), a.region("B"), a.region("C")
    ta, tb = bool(a.const("transpose_A", False)), bool(a.const("transpose_B", False))
    _emit_checked(tr, S.Gemm(A, B, C, ta, tb, bool(a.const("clear_accum", False)), loc=loc),
                  loc)


def _fill(tr, node, loc, name):
    if name == "clear":
        a = Args(tr, node, ["buffer"], loc, "T.clear")
        dst, value = a.region("buffer", True), 0
    else:
        a = Args(tr, node, ["buffer", "value"], loc, "T.fill")
        dst, value = a.region("buffer", True), a.value("value")
    tr.emit(S.Fill(dst, exprs.to_ir(value, loc, like=dst.dtype), loc=loc))


def _reduce(tr, node, loc, name):
    a = Args(tr, node, ["buffer", "out", "dim", "clear"], loc, f"T.{name}")
    src, dst = a.region("buffer"), a.region("out")
    dim = int(a.const("dim", -1))
    rank = len(src.extents)
    if not -rank <= dim < rank:
        raise TileTypeError(f"dim={dim} is out of range for a {rank}-d source", loc)
    dim %= rank
    _emit_checked(tr, S.Reduce(_REDUCE[name], src, dst, dim, bool(a.const("clear", True)),
                               loc=loc), loc)


def _cumsum(tr, node, loc, name):
    a = Args(tr, node, ["src", "dst", "dim", "reverse"], loc, "T.cumsum")
    src = a.region("src")
    dst = a.region("dst") if a.has("dst") and a.value("dst") is not None else src
    dim = int(a.const("dim", 0)) % len(src.extents)
    _emit_checked(tr, S.Cumsum(src, dst, dim, bool(a.const("reverse", False)), loc=loc), loc)


def _atomic_add(tr, node, loc, name):
    a = Args(tr, node, ["dst", "value", "memory_order", "return_prev"], loc, "T.atomic_add")
    dst = region_of(a.operand("dst"), loc)
    val = a.operand("value")
    if a.const("return_prev", False):
        return _atomic_add_prev(tr, dst, val, node, loc)
    if isinstance(val, StartPoint) and isinstance(dst, StartPoint):
        val = Load(val.buffer, val.starts)  # element += element: a scalar atomic
    if isinstance(val, (Region, Buffer, StartPoint)):
        vr = region_of(val, loc)
        vr = operand_region(vr, _extents(dst), loc)
        dst_r = operand_region(dst, vr.extents, loc)
        _emit_checked(tr, S.AtomicAdd(dst_r, vr, loc=loc), loc)
        return
    one = tuple(Const(1, int32) for _ in dst.buffer.shape)
    dst_r = operand_region(dst, one, loc)
    tr.emit(S.AtomicAdd(dst_r, exprs.to_ir(tr.scalar_view(val, node), loc,
                                           like=dst_r.dtype), loc=loc))


def _atomic_add_prev(tr, dst, val, node, loc):
    """`old = T.atomic_add(s[i], v, return_prev=True)` on per-block or per-thread memory:
    old = s[i]; s[i] = old + v, one thread at a time (frontend/fission.py keeps the pair
    in one phase)."""
    if not isinstance(dst, StartPoint) or dst.buffer.scope is Scope.GLOBAL:
        raise TileTypeError(f"T.atomic_add(..., return_prev=True) needs one element of a "
                            f"shared or local buffer; got {describe(dst)}", loc,
                            hint="global memory is shared between blocks, which run in any "
                                 "order here; count in shared memory instead")
    if isinstance(val, StartPoint):  # `X[i]` as the value: that element
        val = Load(val.buffer, val.starts)
    old = Load(dst.buffer, dst.starts)
    prev = Var(tr.unique("prev"), old.dtype)
    tr.emit(S.Let(prev, old, loc=loc))
    new = exprs.call(Op.ADD, [prev, exprs.to_ir(tr.scalar_view(val, node), loc,
                                                like=old.dtype)], loc)
    store = S.Store(dst.buffer, dst.starts, exprs.cast(new, old.dtype, loc), loc=loc)
    tr.__dict__.setdefault("atomic_stores", set()).add(id(store))
    tr.emit(store)
    return prev


def _print(tr, node, loc, name):
    parts, args = [], []
    if name == "print" and isinstance(node.func, ast.Attribute):  # T.print(obj, msg="")
        a = Args(tr, node, ["obj", "msg"], loc, "T.print")
        msg = a.const("msg", "")
        obj = a.operand("obj")
        if isinstance(obj, StartPoint):  # T.print(t[i]): the element's value
            obj = Load(obj.buffer, obj.starts)
        args.append(obj.buffer if isinstance(obj, Region) else tr.scalar_view(obj, node))
        parts = [msg + " {}" if msg else "{}"]
    else:
        for arg in node.args:
            _print_piece(tr, arg, parts, args)
    tr.emit(S.Print(" ".join(parts), tuple(args), loc=loc))


def _print_piece(tr, arg: ast.expr, parts: list, args: list) -> None:
    if isinstance(arg, ast.JoinedStr):
        text = ""
        for v in arg.values:
            if isinstance(v, ast.Constant):
                text += str(v.value).replace("{", "{{").replace("}", "}}")
            else:
                text += "{}"
                args.append(_print_value(tr, v.value))
        parts.append(text)
        return
    v = _print_value(tr, arg)
    if isinstance(v, str):
        parts.append(v.replace("{", "{{").replace("}", "}}"))
    elif exprs.is_ir(v) or isinstance(v, Buffer):
        parts.append("{}")
        args.append(v)
    else:
        parts.append(str(v).replace("{", "{{").replace("}", "}}"))


def _print_value(tr, node: ast.expr):
    v = tr.operand(node)
    if isinstance(v, Region):
        return v.buffer
    if isinstance(v, StartPoint):
        return tr.expr(node)
    return tr.scalar_view(v, node)


def _only_as_statement(tr, node, loc, name):
    raise TileSyntaxError(f"T.{name} must be used as "
                          f"{'a with statement' if name == 'Kernel' else 'a for-loop iterator'}"
                          if name in ("Kernel", "Parallel", "Pipelined", "serial", "unroll")
                          else f"T.{name} can only be assigned to a name", loc)


HANDLERS = {name: _unary for name in _UNARY}
HANDLERS.update({name: _binary for name in _BINARY})
HANDLERS.update({name: _reduce for name in _REDUCE})
HANDLERS.update({name: _alloc for name in _ALLOC})
HANDLERS.update({
    "if_then_else": _if_then_else, "cast": _cast, "reinterpret": _cast,
    "infinity": _infinity, "ceildiv": _ceildiv, "alloc_var": _alloc_var,
    "copy": _copy, "gemm": _gemm, "fill": _fill, "clear": _fill, "cumsum": _cumsum,
    "atomic_add": _atomic_add, "print": _print,
})
for _n in ("Kernel", "Parallel", "Pipelined", "serial", "unroll", "empty", "const"):
    HANDLERS[_n] = _only_as_statement

from tilepy.frontend import annotations, events  # noqa: E402 - their handlers join the table

HANDLERS.update(annotations.HANDLERS)
HANDLERS.update(events.HANDLERS)  # (frontend/extras.py adds its own when imported)
