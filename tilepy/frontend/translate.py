"""The front end proper: a kernel function's AST -> a `PrimFunc`, statement by statement, in
both TileLang styles (`@T.prim_func` with `T.Tensor` parameters; eager `@tilepy.jit` with
`A: T.Tensor(...)`, `T.const`, `T.empty` in the body). Python control flow on build-time
values runs at build time, on runtime values it becomes IR; every node keeps the user's
source location.
"""

from __future__ import annotations

import ast
import builtins as py
import copy
import warnings

from tilepy.errors import (
    NOLOC,
    KernelAssertionError,
    Loc,
    TileLangWarning,
    TileSyntaxError,
    TileTypeError,
)
from tilepy.frontend import annotations, builtins, events, exprs, gridsync, simt
from tilepy.frontend.dtypes import as_format
from tilepy.frontend.expressions import ExpressionMixin
from tilepy.frontend.fission import fission
from tilepy.frontend.macro import Return
from tilepy.frontend.persistent import persistent_loop
from tilepy.frontend.source import Source
from tilepy.frontend.surface import Builtin, SizeExpr, SymbolicSize, TensorSpec
from tilepy.frontend.traced import call_traced, unwrap
from tilepy.frontend.values import DataRef, PointeeView, Stale, describe
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import Scope, bool_, float32, int32
from tilepy.precision.formats import Format

_LOOPS = {"Parallel": S.ForKind.PARALLEL, "parallel": S.ForKind.PARALLEL,
          "Pipelined": S.ForKind.PIPELINED, "serial": S.ForKind.SERIAL,
          "unroll": S.ForKind.UNROLLED, "vectorized": S.ForKind.SERIAL,
          "grid": S.ForKind.SERIAL}  # TVMScript's T.grid(a, b, ...): nested serial loops
_PY_CASTS = {py.int: int32, py.float: float32, py.bool: bool_}  # int(x) etc. on IR values


class Translator(ExpressionMixin):
    """Builds one PrimFunc. `env` holds the function's globals, closure and build-time
    arguments; `eager` selects the style that declares tensors in the body."""

    def __init__(self, source: Source, env: dict, eager: bool):
        self.src = source
        self.env = env
        self.eager = eager
        self.scopes: list[dict] = [{}]
        self.bodies: list[list] = [[]]
        self.loop_depth: list[int] = [0]
        self.names: set[str] = set()
        self.params: list[Buffer] = []
        self.sizes: dict[str, Var] = {}
        self.outputs: list[Buffer] = []
        self.returned = None
        self.pending_name = "buf"
        self.in_kernel = False
        self.simt, self.thread_vars, self.reducers, self.thread_shape = False, None, [], (1,) * 3
        self.const_names: set[str] = set()  # eager T.const sizes left symbolic
        self.const_dims: dict[str, tuple[str, int]] = {}  # ... and the tensor dims giving them

    # ------------------------------------------------------------ plumbing
    def loc(self, node: ast.AST) -> Loc:
        return self.src.loc(node)

    def emit(self, s) -> None:
        if not self.in_kernel and not isinstance(s, S.Launch):
            raise TileSyntaxError("tile statements must be inside `with T.Kernel(...)`", s.loc)
        self.bodies[-1].append(s)

    def lookup(self, name: str, loc: Loc):
        for scope in reversed(self.scopes):
            if name in scope:
                value = scope[name][0]
                if isinstance(value, Stale):
                    raise value.error(loc)
                return value
        if name in self.env:
            value = self.env[name]
            is_size = isinstance(value, (SymbolicSize, SizeExpr))
            return self.size_expr(value, loc) if is_size else value
        raise TileSyntaxError(f"name {name!r} is not defined", loc)

    def bind(self, name: str, value) -> None:
        self.scopes[-1][name] = (value, self.loop_depth[-1])

    def unique(self, base: str) -> str:
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        return name

    def fresh_name(self) -> str:
        return self.unique(self.pending_name)

    def declare(self, buf: Buffer, loc: Loc) -> Buffer:
        self.emit(S.Alloc(buf, loc=loc))
        return buf

    def call_builtin(self, fn, node, loc):
        return builtins.call_builtin(self, fn, node, loc)

    def block(self, stmts, scope: bool = True, loop: bool = False,
              where: Loc | None = None) -> tuple:
        """Translate statements into a new body (and a new name scope); `where` is the
        loop or `if` statement that owns the body."""
        self.bodies.append([])
        if scope:
            self.scopes.append({})
        self.loop_depth.append(self.loop_depth[-1] + (1 if loop else 0))
        try:
            for st in stmts:
                self.stmt(st)
        finally:
            self.loop_depth.pop()
            if scope:
                self.close_scope("loop" if loop else "if", where)
            body = self.bodies.pop()
        return tuple(body)

    def close_scope(self, block: str, where: Loc | None) -> None:
        """End the innermost scope of a runtime loop or branch. A name it rebound that an
        outer scope also binds becomes Stale there: after the block, the kernel would hold
        the outer binding while Python would hold the last inner one."""
        inner = self.scopes.pop()
        for name in inner:
            if self.find(name) is not None:
                self.bind(name, Stale(name, block, where or NOLOC))

    # ------------------------------------------------------------ function
    def function(self, name: str, spec_params: list[tuple[str, TensorSpec, Loc]]):
        """Translate the body; returns (PrimFunc fields) for the caller to assemble."""
        for pname, spec, loc in spec_params:
            buf = self.param(pname, spec, loc)
            self.bind(pname, Load(buf, (Const(0, int32),)) if spec.scalar else buf)
        body = self.src.fn_def.body
        try:
            for st in body:
                self.stmt(st)
        except Return as r:
            self.returned = r.value
        return tuple(self.bodies[0])

    def param(self, name: str, spec: TensorSpec, loc: Loc) -> Buffer:
        shape = tuple(self.size_expr(s, loc) for s in spec.shape)
        buf = Buffer(self.unique(name), shape, spec.dtype, Scope.GLOBAL)
        self.params.append(buf)
        return buf

    def size_expr(self, s, loc: Loc):
        s = unwrap(s)  # a size passed through a Python call (`T.Tensor(n, dt)`, n runtime)
        if isinstance(s, SymbolicSize):
            if s.name not in self.sizes:
                self.sizes[s.name] = Var(self.unique(s.name), s.dtype)
            return self.sizes[s.name]
        if isinstance(s, SizeExpr):
            ops = {"+": Op.ADD, "-": Op.SUB, "*": Op.MUL, "//": Op.FLOORDIV, "%": Op.MOD}
            args = [self.size_expr(a, loc) for a in s.args]
            return exprs.call(ops[s.op], args, loc)
        if exprs.is_ir(s) or isinstance(s, int):
            return exprs.index_expr(s, loc)
        raise TileTypeError(f"a tensor dimension must be an int or a symbolic size; got "
                            f"{describe(s)}", loc)

    # ------------------------------------------------------------ statements
    def stmt(self, node: ast.stmt) -> None:
        method = getattr(self, "_s_" + type(node).__name__, None)
        if method is None:
            raise TileSyntaxError(f"{type(node).__name__} statements are not supported in a "
                                  "kernel", self.loc(node))
        method(node)

    def _s_Pass(self, node):
        pass

    def _s_Expr(self, node):
        if isinstance(node.value, ast.Constant):  # a docstring or a bare literal
            return
        self.expr(node.value)

    def _s_Assert(self, node):
        """`assert cond, msg` on build-time values is checked now; on run-time values inside
        a T.Kernel block it becomes a check that fails the launch naming the block."""
        loc = self.loc(node)
        cond = self.expr(node.test)
        if exprs.is_ir(cond):
            return self.runtime_assert(node, cond, loc)
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else None
            raise KernelAssertionError(
                "assertion failed while building the kernel"
                + (f": {msg}" if msg is not None else ""), loc,
                hint="the kernel's build-time arguments (sizes, tiles, dtypes) do not meet "
                     "its assert")

    def runtime_assert(self, node, cond, loc: Loc) -> None:
        if not self.in_kernel:
            raise TileSyntaxError(
                "assert on a runtime value outside T.Kernel: expected it inside the kernel "
                "body, or on a value known when the kernel is built", loc,
                hint="move the assert into the `with T.Kernel(...)` block")
        if isinstance(node.msg, ast.JoinedStr):  # f-strings: shown as written
            msg = ast.unparse(node.msg)
        else:
            msg = self.expr(node.msg) if node.msg is not None else ""
        if exprs.is_ir(msg):
            raise TileTypeError("assert message: expected text known when the kernel is "
                                "built; got a runtime value", loc,
                                hint="use a string, or T.print the value before the assert")
        cond = exprs.to_ir(cond, loc)
        if not cond.dtype.is_bool:
            cond = exprs.call(Op.NE, [cond, 0], loc)
        self.emit(S.Assert(cond, str(msg), loc=loc))

    def _s_Return(self, node):
        raise Return(None if node.value is None else self.value(node.value))

    def _s_With(self, node):
        names = [self.frame_name(item.context_expr) for item in node.items]
        if names == ["Kernel"]:
            return self.launch(node, node.items[0])
        if names == ["PersistentKernel"]:  # see launch()
            return self.launch(node, node.items[0], persistent=True)
        if names in (["If"], ["If", "Then"]):
            return self.frame_if(node, names)
        if names == ["While"]:
            return self.frame_while(node)
        if names == ["attr"]:
            return simt.attr_frame(self, node)
        if names == ["iket_range"]:
            return events.range_frame(self, node)
        raise TileSyntaxError("only `with T.Kernel(...) as ...:`, `with T.If(cond):` and "
                              "`with T.While(cond):` frames are supported", self.loc(node),
                              hint="T.Then() and T.Else() go inside `with T.If(cond):` "
                                   "(or `with T.If(cond), T.Then():`)")

    def frame_name(self, call) -> str | None:
        """The T.<name> a `with` item calls (Kernel, If, Then, Else), else None."""
        fn = self.value(call.func) if isinstance(call, ast.Call) else None
        return fn.name if isinstance(fn, Builtin) else None

    def frame_if(self, node: ast.With, names: list[str]) -> None:
        """TVMScript's `with T.If(c):` holding `with T.Then():` and optionally `with
        T.Else():`, or `with T.If(c), T.Then():`: the same as `if c: ... else: ...`."""
        loc = self.loc(node)
        call = node.items[0].context_expr
        if len(call.args) != 1 or call.keywords:
            raise TileTypeError("T.If takes one condition", loc)
        if names == ["If", "Then"]:
            return self.branch(call.args[0], node.body, [], loc)
        parts = [st for st in node.body if not isinstance(st, ast.Pass)]
        got = [self.frame_name(st.items[0].context_expr)
               if isinstance(st, ast.With) and len(st.items) == 1 else None for st in parts]
        if got not in (["Then"], ["Then", "Else"]):
            raise TileSyntaxError("`with T.If(cond):` must hold `with T.Then():` and "
                                  "optionally `with T.Else():`, nothing else", loc)
        orelse = parts[1].body if len(parts) == 2 else []
        self.branch(call.args[0], parts[0].body, orelse, loc)

    def frame_while(self, node: ast.With) -> None:
        """TVMScript's `with T.While(cond):`: the same as `while cond:`."""
        call = node.items[0].context_expr
        if len(call.args) != 1 or call.keywords:
            raise TileTypeError("T.While takes one condition", self.loc(node))
        self._s_While(ast.copy_location(ast.While(call.args[0], node.body, []), node))

    def launch(self, node: ast.With, item: ast.withitem, persistent: bool = False) -> None:
        """`with T.Kernel(grid..., threads=...) as (bx, ...)`. TileLang's
        `T.PersistentKernel(grid..., threads=..., order=, panel_size=)` launches fewer
        blocks that loop over the grid's tiles, each tile once, (bx, by) its coordinates;
        blocks share nothing, so it computes what T.Kernel over that grid does (the tile
        order is recorded as a hint)."""
        loc = self.loc(node)
        if self.in_kernel:
            raise TileSyntaxError("T.Kernel cannot be nested", loc)
        call = item.context_expr
        grid = tuple(exprs.index_expr(self.expr(a), loc) for a in call.args)
        if not 1 <= len(grid) <= 3:
            raise TileTypeError(f"T.Kernel takes 1 to 3 grid sizes; got {len(grid)}", loc)
        kw = {k.arg: self.expr(k.value) for k in call.keywords}
        if persistent:
            order = ", ".join(f"{k}={kw[k]!r}" for k in ("order", "panel_size") if k in kw)
            annotations.add_hint(self, f"T.PersistentKernel({order})")
        if isinstance(kw.get("prelude"), str):  # CUDA text the launch brings
            from tilepy.frontend.externs import add_source

            add_source(self, kw["prelude"])
        threads = kw.get("threads", 128)
        threads = tuple(threads) if isinstance(threads, (tuple, list)) else (int(threads),)
        names = self.target_names(item.optional_vars, len(grid), loc)
        bvars = tuple(Var(self.unique(n), int32) for n in names)
        simt.begin_launch(self, threads, loc)
        self.in_kernel = True
        self.block_vars = bvars  # T.get_block_binding(i)
        self.launch_depth = len(self.bodies) + 1  # T.sync_grid's level (frontend/gridsync.py)
        self.scopes.append({})
        for n, v in zip(names, bvars):
            self.bind(n, v)
        try:
            body = self.block(node.body, scope=False)
        finally:
            self.scopes.pop()
            self.in_kernel = False
        if self.simt:
            body = fission(self, body, threads, self.thread_vars, loc)
        else:
            body = simt.drop_barriers(body)
        for part_vars, part in gridsync.split(self, bvars, body):
            self.emit(S.Launch(grid, part_vars, threads, part, loc=loc))

    def target_names(self, target, n: int, loc: Loc) -> list[str]:
        """Names for `as bx` / `as (bx, by)`; missing ones are made up."""
        if target is None:
            got: list[str] = []
        elif isinstance(target, ast.Name):
            got = [target.id]
        elif isinstance(target, (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Name) for e in target.elts):
            got = [e.id for e in target.elts]
        else:
            raise TileSyntaxError("bind the block indices to names", loc)
        if len(got) > n:
            raise TileTypeError(f"T.Kernel has {n} grid dimension(s) but {len(got)} names "
                                "were bound", loc)
        return got + [f"b{'xyz'[i]}" for i in range(len(got), n)]

    # ------------------------------------------------------------ loops
    def _s_For(self, node):
        loc = self.loc(node)
        if node.orelse:
            self.drop_for_else(node)
        it = node.iter
        fn = self.value(it.func) if isinstance(it, ast.Call) else None
        if isinstance(fn, Builtin) and fn.name in _LOOPS:
            return self.tile_loop(node, fn.name, loc)
        if isinstance(fn, Builtin) and fn.name == "Persistent":
            return persistent_loop(self, node, loc)
        if (fn is range or isinstance(fn, Builtin) and fn.name == "serial") \
                and not self.in_kernel:
            return self.host_loop(node, it, loc)
        if fn is range:
            return self.range_loop(node, it, S.ForKind.SERIAL, loc)
        seq = self.expr(it)
        if exprs.is_ir(seq) or not hasattr(seq, "__iter__"):
            raise TileTypeError(f"cannot iterate over {describe(seq)}", loc,
                                hint="use range(...), T.serial, T.Parallel or T.Pipelined")
        for item in seq:  # a build-time sequence: unrolled while the kernel is built
            self.assign_target(node.target, item, loc)
            for st in node.body:
                self.stmt(st)

    def host_loop(self, node: ast.For, call: ast.Call, loc: Loc) -> None:
        """A loop around launches (TileLang's multi-kernel programs): its bounds must fold
        to integers while building (constant expressions do), and it is unrolled."""
        bounds = [exprs.fold(self.expr(a)) for a in call.args]
        if any(b is None for b in bounds) or not isinstance(node.target, ast.Name):
            raise TileSyntaxError("a loop around T.Kernel launches needs bounds known when "
                                  "the kernel is built", loc)
        for i in range(*[int(b) for b in bounds]):
            self.bind(node.target.id, i)
            for st in node.body:
                self.stmt(st)

    def drop_for_else(self, node: ast.For) -> None:
        """TileLang's parser (TVMScript) ignores the `else:` of a kernel's for loop, so its
        programs rely on that; Python would run it (kernel loops have no `break`). The else
        is dropped, with a warning naming the line."""
        warnings.warn(TileLangWarning(
            f"{self.loc(node.orelse[0])}: the `else:` of a for loop in a kernel is "
            "ignored, as TileLang ignores it (Python would run it after the loop); move it "
            "out of the loop or delete it"), stacklevel=2)

    def tile_loop(self, node: ast.For, name: str, loc: Loc) -> None:
        kind = _LOOPS[name]
        call = node.iter
        if kind is S.ForKind.PARALLEL or name == "grid":
            extents = [self.expr(a) for a in call.args]
            names = self.target_names(node.target, len(extents), loc)
            if len(names) != len(extents):
                raise TileTypeError(f"T.{name} has {len(extents)} extents but "
                                    f"{len(names)} loop variables", loc)
            self.nested_loops(list(zip(names, extents)), node.body, kind, loc)
            return
        self.range_loop(node, call, kind, loc)

    def nested_loops(self, dims, body, kind, loc) -> None:
        (name, extent), rest = dims[0], dims[1:]
        var = Var(self.unique(name), int32)
        self.scopes.append({})
        self.bind(name, var)
        self.loop_depth.append(self.loop_depth[-1] + 1)
        try:
            if rest:
                self.bodies.append([])
                self.nested_loops(rest, body, kind, loc)
                inner = tuple(self.bodies.pop())
            else:
                inner = self.block(body, loop=True, where=loc)
        finally:
            self.loop_depth.pop()
            self.close_scope("loop", loc)
        zero, one = Const(0, int32), Const(1, int32)
        self.emit(S.For(var, zero, exprs.index_expr(extent, loc), one, kind, inner, loc=loc))

    def range_loop(self, node: ast.For, call: ast.Call, kind, loc: Loc) -> None:
        args = [self.expr(a) for a in call.args]
        kw = {k.arg: self.expr(k.value) for k in call.keywords}
        stages = kw.pop("num_stages", 0)
        if kind is S.ForKind.PIPELINED and len(args) == 3 and not kw:
            args, stages = args[:2], args[2]  # T.Pipelined(start, stop, num_stages)
        if len(args) == 1:
            args = [0] + args
        if not 2 <= len(args) <= 3:
            raise TileTypeError(f"a loop takes 1 to 3 bounds; got {len(args)}", loc)
        start, stop = args[0], args[1]
        step = args[2] if len(args) == 3 else 1
        if not isinstance(node.target, ast.Name):
            raise TileSyntaxError("this loop binds a single name", loc)
        var = Var(self.unique(node.target.id), int32)
        self.scopes.append({})
        self.bind(node.target.id, var)
        try:
            body = self.block(node.body, loop=True, where=loc)
        finally:
            self.close_scope("loop", loc)
        if exprs.is_ir(stages):
            raise TileTypeError("num_stages must be known when the kernel is built", loc)
        body = simt.lower_breaks(self, body, loc)
        self.emit(S.For(var, exprs.index_expr(start, loc), exprs.index_expr(stop, loc),
                        exprs.index_expr(step, loc), kind, body, int(stages or 0), loc=loc))

    # ------------------------------------------------------------ branches
    def _s_If(self, node):
        self.branch(node.test, node.body, node.orelse, self.loc(node))

    def branch(self, test, body: list, orelse: list, loc: Loc) -> None:
        cond = self.expr(test)
        if not exprs.is_ir(cond):
            for st in body if cond else orelse:
                self.stmt(st)
            return
        then_body = self.block(body, where=loc)
        else_body = self.block(orelse, where=loc)
        self.emit(S.If(exprs.as_bool(cond, loc), then_body, else_body, loc=loc))

    def _s_While(self, node):
        loc = self.loc(node)
        if node.orelse:
            raise TileSyntaxError("while ... else is not supported in a kernel", loc)
        cond = self.expr(node.test)
        if not exprs.is_ir(cond):
            raise TileTypeError("a while loop in a kernel needs a runtime condition", loc,
                                hint="use a for loop for a count known when building")
        body, cond = simt.lower_breaks(self, self.block(node.body, loop=True, where=loc),
                                       loc, exprs.as_bool(cond, loc))
        self.emit(S.While(cond, body, loc=loc))

    # ------------------------------------------------------------ assignments
    def _s_Assign(self, node):
        loc = self.loc(node)
        if len(node.targets) != 1:
            raise TileSyntaxError("chained assignment is not supported in a kernel", loc)
        target = node.targets[0]
        if isinstance(target, ast.Name):
            self.pending_name = target.id
        if self.eager and self.eager_declaration(target, node.value, loc):
            return
        if isinstance(target, ast.Subscript):
            return self.store(target, self.expr(node.value), loc)
        self.assign_target(target, self.value(node.value), loc)

    def _s_AnnAssign(self, node):
        loc = self.loc(node)
        if node.value is None:
            if not self.eager:
                raise TileSyntaxError("a bare annotation declares a tensor only in an eager "
                                      "@tilepy.jit kernel", loc)
            return self.declare_tensor(node.target, node.annotation, loc)
        if self.in_kernel and isinstance(node.target, ast.Name):
            dt = self.annotation_dtype(node.annotation)
            if dt is not None:  # `s: T.float32 = 0.0`: a scalar variable, as T.alloc_var
                return self.declare_var(node.target.id, dt, self.expr(node.value), loc)
        self._s_Assign(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno,
                                  col_offset=node.col_offset))

    def _s_AugAssign(self, node):
        loc = self.loc(node)
        binop = ast.BinOp(left=_as_load(node.target), op=node.op, right=node.value,
                          lineno=node.lineno, col_offset=node.col_offset)
        if isinstance(node.target, ast.Subscript):
            return self.store(node.target, self.expr(binop), loc)
        self.assign_target(node.target, self.expr(binop), loc)

    def annotation_dtype(self, annotation: ast.expr) -> Format | None:
        try:
            dt = self.expr(annotation)
        except (TileSyntaxError, TileTypeError):  # not a value the kernel knows: no dtype
            return None
        return as_format(dt)

    def declare_var(self, name: str, dt: Format, init, loc: Loc) -> None:
        self.pending_name = name
        buf = self.declare(Buffer(self.fresh_name(), (), dt, Scope.VAR), loc)
        self.emit(S.Store(buf, (), exprs.to_ir(init, loc, like=dt), loc=loc))
        self.assign_name(name, buf, loc)

    def assign_target(self, target, value, loc: Loc) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if exprs.is_ir(value) or not hasattr(value, "__len__"):
                raise TileTypeError(f"cannot unpack {describe(value)}", loc)
            if len(value) != len(target.elts):
                raise TileTypeError(f"cannot unpack {len(value)} values into "
                                    f"{len(target.elts)} names", loc)
            for t, v in zip(target.elts, value):
                self.assign_target(t, v, loc)
            return
        if not isinstance(target, ast.Name):
            raise TileSyntaxError("assign to a name or to a buffer element", loc)
        self.assign_name(target.id, value, loc)

    def assign_name(self, name: str, value, loc: Loc) -> None:
        old = self.find(name)
        if old is not None and isinstance(old[0], Buffer) and old[0].scope is Scope.VAR \
                and not isinstance(value, Buffer):
            buf = old[0]
            self.emit(S.Store(buf, (), exprs.to_ir(value, loc, like=buf.dtype), loc=loc))
            return
        if old is not None and old[1] < self.loop_depth[-1] and not isinstance(old[0], Stale):
            raise TileTypeError(
                f"{name!r} was bound outside this loop and cannot be reassigned in it (a "
                "kernel would not carry the new value to the next iteration or past the "
                "loop)", loc,
                hint=f"declare it before the loop with `{name} = T.alloc_var(dtype)` (or "
                     f"`T.alloc_local((1,), dtype)`, used as {name}[0]) to update it in the "
                     "loop, or give the per-iteration value another name")
        if isinstance(value, TensorSpec) and isinstance(value.data, DataRef):
            value = self.declare(self.re_view(name, value, loc), loc)
        if exprs.is_ir(value) and self.in_kernel and not isinstance(value, Const) and \
                value not in (self.thread_vars or ()):  # a thread index keeps its identity
            var = Var(self.unique(name), value.dtype)
            self.emit(S.Let(var, value, loc=loc))
            value = var
        self.bind(name, value)

    def find(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def re_view(self, name: str, spec: TensorSpec, loc: Loc) -> Buffer:
        base = spec.data.buffer
        shape = tuple(self.size_expr(s, loc) for s in spec.shape)
        if spec.dtype != base.dtype:
            raise TileTypeError(f"a re-view keeps the dtype of {base.name} ({base.dtype}); "
                                f"got {spec.dtype}", loc)
        return Buffer(self.unique(name), shape, spec.dtype, base.scope, data=base)

    def store(self, target: ast.Subscript, value, loc: Loc) -> None:
        dest, prefix = self.value(target.value), ()
        if isinstance(dest, PointeeView):
            dest, prefix = dest.buffer, (dest.index,)
        if not isinstance(dest, Buffer):
            raise TileTypeError(f"cannot assign into {describe(dest)}", loc)
        ref = self.buffer_subscript(dest, target.slice, loc, prefix)
        if not isinstance(ref, Load):
            raise TileSyntaxError("assigning to a slice is not supported", loc,
                                  hint="use T.fill(region, value) or T.copy(src, region)")
        if isinstance(value, Buffer) or not (exprs.is_ir(value) or exprs.is_py_scalar(value)):
            raise TileTypeError(f"cannot store {describe(value)} into {dest.name}", loc)
        self.emit(S.Store(dest, ref.indices, exprs.to_ir(value, loc, like=dest.dtype), loc=loc))

    # ------------------------------------------------------------ eager declarations
    def declare_tensor(self, target, annotation, loc: Loc) -> None:
        if not isinstance(target, ast.Name):
            raise TileSyntaxError("annotate a parameter name with T.Tensor(...)", loc)
        spec = self.expr(annotation)
        if not isinstance(spec, TensorSpec):
            raise TileTypeError(f"expected T.Tensor(shape, dtype); got {describe(spec)}", loc)
        if self.find(target.id) is not None or target.id not in self.eager_params:
            raise TileSyntaxError(f"{target.id!r} is not a parameter of the kernel", loc,
                                  hint="only function parameters can be declared as tensors")
        self.note_const_dims(target.id, spec.shape)
        self.bind(target.id, self.param(target.id, spec, loc))

    def note_const_dims(self, param: str, shape) -> None:
        """Record which dimension of which declared tensor gives each `T.const` size still
        unknown (`q_shape = [M, dim]; Q: T.Tensor(q_shape, dt)`): the call's arrays then
        give their values, as TileLang's eager builder binds them."""
        const_vars = {id(self.sizes[n]): n for n in self.const_names if n in self.sizes}
        for d, s in enumerate(shape):
            name = const_vars.get(id(unwrap(s)))
            if name is not None:
                self.const_dims.setdefault(name, (param, d))

    def eager_declaration(self, target, value_node, loc: Loc) -> bool:
        """`M, N = T.const("M, N")` and `C = T.empty(shape, dtype)` (eager style)."""
        if not isinstance(value_node, ast.Call):
            return False
        fn = self.value(value_node.func)
        if not isinstance(fn, Builtin) or fn.name not in ("const", "empty"):
            return False
        if self.in_kernel:
            raise TileSyntaxError(f"T.{fn.name} belongs before `with T.Kernel`", loc)
        args = [self.expr(a) for a in value_node.args]
        if fn.name == "const":
            names = [n.strip() for n in str(args[0]).split(",") if n.strip()]
            known = getattr(self, "const_values", {})  # bound from the call's arrays
            sizes = [known[n] if n in known else self.size_expr(SymbolicSize(n), loc)
                     for n in names]
            self.const_names.update(n for n in names if n not in known)
            self.assign_target(target, sizes[0] if len(sizes) == 1 else tuple(sizes), loc)
            return True
        if not isinstance(target, ast.Name):
            raise TileSyntaxError("assign T.empty(...) to one name", loc)
        spec = TensorSpec(args[0], args[1] if len(args) > 1 else "float32")
        buf = self.param(target.id, spec, loc)
        self.outputs.append(buf)
        self.bind(target.id, buf)
        return True

    # ------------------------------------------------------------ python calls on IR
    def call_python_on_ir(self, fn, args, kwargs, node, loc):
        if fn in (py.min, py.max) and len(args) >= 2 and not kwargs:
            op = Op.MIN if fn is py.min else Op.MAX
            out = args[0]
            for a in args[1:]:
                out = exprs.call(op, [out, a], loc)
            return out
        if fn is py.abs and len(args) == 1:
            return exprs.call(Op.ABS, [args[0]], loc)
        if fn in (py.int, py.float, py.bool) and len(args) == 1:
            return exprs.cast(args[0], _PY_CASTS[fn], loc)
        if callable(fn):
            return self.build_time(lambda: call_traced(fn, args, kwargs, loc), loc)
        raise TileTypeError(f"{describe(fn)} is not callable", loc)


def _as_load(target: ast.expr) -> ast.expr:
    """The AugAssign target read as an expression (`x += 1` reads x)."""
    node = copy.deepcopy(target)
    for n in ast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return node
