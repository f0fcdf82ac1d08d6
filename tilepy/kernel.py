"""`Kernel` objects and the decorators that make them (`@T.prim_func`, `@tilepy.jit`).

A Kernel holds one PrimFunc: it checks the arrays it is called with against the signature
(dtypes, shapes, symbolic sizes bound consistently, contiguity), allocates `out_idx`
outputs, runs the active backend, and returns the outputs. It decides no semantics.
"""

from __future__ import annotations

import ast
import functools
import html
import inspect
import sys
import weakref

import numpy as np

from tilepy import pointers
from tilepy.backend import run
from tilepy.boundary import api_boundary, is_internal
from tilepy.compat.torch_bridge import from_torch, unpack_int4
from tilepy.errors import ArgumentError, Loc, TileSyntaxError
from tilepy.frontend.annotations import bind_scalars, func_attrs, scalar_size
from tilepy.frontend.dtypes import as_format
from tilepy.frontend.eager import (
    bind_eager,
    const_values,
    tensor_param_names,
    translate_eager,
)
from tilepy.frontend.source import environment, read_source
from tilepy.frontend.surface import TensorSpec
from tilepy.frontend.translate import Translator
from tilepy.ir.expr import Buffer, Call, Const, Expr, Var
from tilepy.ir.ops import Op, reference
from tilepy.ir.printer import format_expr, format_func
from tilepy.ir.stmt import Launch, PrimFunc, written_params
from tilepy.ir.verify import verify
from tilepy.limits import check_built, check_call


class IRText(str):
    """Printed IR: a str that shows itself as text in the REPL."""

    def __repr__(self) -> str:
        return str(self)


def _fmt(e) -> str:
    return format_expr(e)


class Kernel:
    """A compiled-on-demand kernel. Call it with numpy / ml_dtypes arrays."""

    def __init__(self, func: PrimFunc, out_idx=(), empty_outputs: bool = False):
        verify(func)  # a front-end bug must never reach a backend
        check_built(func)  # block and tile sizes no launch can run
        idx = out_idx if isinstance(out_idx, (list, tuple)) else [out_idx]
        self.func = func.__class__(**{**func.__dict__, "out_idx": _buffer_out_idx(
            func, idx) if idx else func.out_idx})
        self.out_idx = self.func.out_idx
        # the kernel writes every element of its out_idx outputs: allocate them with
        # np.empty, as TileLang's torch.empty (a zero fill is a serial pass over them)
        self.empty_outputs = bool(empty_outputs)

    @property
    def name(self) -> str:
        return self.func.name

    @property
    @api_boundary
    def ir(self) -> IRText:
        return IRText(format_func(self.func))

    @api_boundary
    def ir_after(self, name: str, fast: bool = False, fuse: bool | None = None) -> IRText:
        """The IR the JIT's pass `name` leaves (jit/passes/: "initfill", "fusion", "hoist",
        "guards"), after the passes before it; `fast`/`fuse` as for the JIT (fusion runs in
        fast mode or with fuse=True). The interpreter runs this IR too."""
        from tilepy.jit import passes  # the JIT layer loads lazily (DESIGN.md, Layers)

        return IRText(format_func(passes.run(self.func, fast if fuse is None else fuse,
                                             upto=name)))

    @property
    @api_boundary
    def source(self) -> str:
        """The Python source the JIT generates for this kernel."""
        from tilepy.jit import source  # the JIT layer loads lazily (DESIGN.md, Layers)

        return IRText(source(self.func))

    def __repr__(self) -> str:
        grids = [s for s in self.func.body if isinstance(s, Launch)]
        grid = ", ".join(_fmt(g) for g in grids[0].grid) if grids else ""
        ins = [_sig(b) for i, b in enumerate(self.func.params)
               if i not in self.out_idx and i not in self.func.scratch]
        outs = [_sig(self.func.params[i]) for i in self.out_idx]
        arrow = f" -> {', '.join(outs)}" if outs else ""
        return f"<Kernel {self.name} grid=({grid}) {' '.join(ins)}{arrow}>"

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(repr(self))}\n\n{html.escape(str(self.ir))}</pre>"

    @api_boundary
    def __call__(self, *args):
        args, back = from_torch(args)  # torch tensors in and out (compat/torch_bridge.py)
        loc = _caller_loc()
        arrays, sizes = bind_arguments(self.func, args, loc, self.empty_outputs)
        write_back = pointers.fill(self.func, arrays, loc)  # T.make_tensor's address tables
        run(self.func, arrays, sizes)
        write_back()
        outs = [arrays[self.func.params[i].name] for i in self.out_idx]
        if not outs:
            return None
        return back(outs[0] if len(outs) == 1 else tuple(outs))


def _buffer_out_idx(func: PrimFunc, idx) -> tuple[int, ...]:
    """`out_idx` counts the declared parameters, scalar ones (`n: T.int32`) included, as
    TileLang's does; the IR's params hold the buffers only."""
    scalars = dict(func.scalars)
    n = len(func.params) - len(func.scratch) + len(scalars)
    declared = sorted(i % n for i in idx)
    for d in declared:
        if d in scalars:
            raise ArgumentError(f"out_idx {d} names the scalar parameter {scalars[d]!r} of "
                                f"{func.name}; outputs must be tensors", func.loc,
                                hint="count out_idx over all parameters, scalars included")
    if scalars and declared and min(declared) < max(scalars):  # calls pass scalars by place
        raise ArgumentError(f"{func.name}: an output (out_idx {min(declared)}) declared before "
                            "a scalar parameter is not supported", func.loc,
                            hint="declare the output tensors after the scalar parameters")
    return tuple(d - sum(p < d for p in scalars) for d in declared)


def _sig(b: Buffer) -> str:
    return f"{b.name}:{b.dtype}[{','.join(_fmt(s) for s in b.shape)}]"


def _caller_loc() -> Loc:
    """The first stack frame outside tilepy: where the user called the kernel."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return Loc()
    return Loc(f.f_code.co_filename, f.f_lineno, 0)


# ------------------------------------------------------------------ argument binding


def eval_index(e: Expr, sizes: dict[str, int]) -> int:
    """The value of an integer size expression once the symbolic sizes are bound."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return sizes[e.name]
    if isinstance(e, Call):
        vals = [eval_index(a, sizes) for a in e.args]
        fast = _INT_FAST.get(e.op)  # plain int arithmetic where it equals the op table's
        if fast is not None and len(vals) == 2 and e.dtype.name in ("int32", "int64") and \
                (vals[1] != 0 or e.op in (Op.ADD, Op.SUB, Op.MUL)):
            got = fast(*vals)
            if -2 ** 31 <= got < 2 ** 31:
                return got
        args = [np.asarray(v, dtype=np.int64) for v in vals]
        return int(reference(e.op, args, tuple(a.dtype for a in e.args), e.dtype))
    raise KeyError(str(e))


# size arithmetic evaluated on Python ints (floor division and modulo floor, as numpy's);
# anything else, or a result outside int32, goes through the op table
_INT_FAST = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b,
             Op.MUL: lambda a, b: a * b, Op.FLOORDIV: lambda a, b: a // b,
             Op.MOD: lambda a, b: a % b}


def bind_arguments(func: PrimFunc, args, loc: Loc, empty_outputs: bool = False):
    """Check `args` against the signature; returns (arrays by name, sizes by name).
    `empty_outputs`: out_idx outputs uninitialised (Kernel.empty_outputs), else zeroed."""
    sizes: dict[str, int] = {}
    args = bind_scalars(func, args, sizes, loc)
    inputs = [b for i, b in enumerate(func.params)
              if i not in func.out_idx and i not in func.scratch]
    if len(args) != len(inputs):
        names = ", ".join(b.name for b in inputs)
        raise ArgumentError(f"{func.name} takes {len(inputs)} array(s) ({names}); got "
                            f"{len(args)}", loc)
    arrays: dict[str, np.ndarray] = {}
    written = _written(func)  # one walk of the body per PrimFunc, not per call
    args = [np.full(1, a, b.dtype.np_dtype) if _is_number(a) and b.static_shape() == (1,)
            and b.name not in written else a  # a float scalar parameter's value
            for b, a in zip(inputs, args)]
    for buf, arr in zip(inputs, args):
        static = buf.static_shape()  # int4 data may come packed in int8 storage
        if static is not None and buf.name not in written:
            arr = unpack_int4(buf.dtype, static, arr)
        arrays[buf.name] = _check_array(func, buf, arr, sizes, loc, buf.name in written)
    _bind_derived(func, inputs, args, sizes, loc)
    check_call(func, sizes, eval_index)
    for i in func.out_idx + func.scratch:  # outputs, and scratch buffers (never returned)
        buf = func.params[i]
        new = np.empty if empty_outputs and i not in func.scratch else np.zeros
        arrays[buf.name] = new(_output_shape(func, buf, sizes, loc), buf.dtype.np_dtype)
    return arrays, sizes


_WRITTEN: dict[int, frozenset[str]] = {}  # id(func) -> its written parameters, while it lives


def _written(func: PrimFunc) -> frozenset[str]:
    """written_params(func), found once per PrimFunc: it walks the whole body, a cost per
    call that grew with the kernel's size (a row kernel with contractions paid it in every
    call). The entry goes when the PrimFunc does, so its id cannot be reused stale."""
    hit = _WRITTEN.get(id(func))
    if hit is None:
        hit = _WRITTEN[id(func)] = written_params(func)
        weakref.finalize(func, _WRITTEN.pop, id(func), None)
    return hit


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_array(func, buf: Buffer, arr, sizes: dict, loc: Loc, written: bool) -> np.ndarray:
    who = f"{func.name}: argument {buf.name}"
    arr = _plain_array(who, arr, loc)
    if arr.dtype != buf.dtype.np_dtype:
        raise ArgumentError(f"{who} expected dtype {buf.dtype}; got {arr.dtype}", loc,
                            hint=f"convert with x.astype(tilepy.dtype('{buf.dtype}').np_dtype)"
                            if buf.dtype.is_narrow_float else f"convert with x.astype("
                            f"np.{buf.dtype.np_dtype.name})")
    if arr.ndim != buf.ndim:
        raise ArgumentError(f"{who} expected {buf.ndim} dimension(s) "
                            f"{_shape_text(buf)}; got shape {arr.shape}", loc)
    for dim, (want, got) in enumerate(zip(buf.shape, arr.shape)):
        if isinstance(want, Const) and want.value != got:
            raise ArgumentError(f"{who} expected shape {_shape_text(buf)}; got {arr.shape} "
                                f"(dimension {dim} differs)", loc)
        if isinstance(want, Var):
            _check_fits(who, want, dim, got, loc)
            if sizes.setdefault(want.name, got) != got:
                raise ArgumentError(
                    f"{who} has {want.name} = {got} in dimension {dim}, but an earlier "
                    f"argument bound {want.name} = {sizes[want.name]}", loc,
                    hint=f"{want.name} must be the same in every argument that uses it")
    if not arr.flags.c_contiguous:
        raise ArgumentError(f"{who} must be C-contiguous (row-major)", loc,
                            hint="pass np.ascontiguousarray(x)")
    if not arr.flags.aligned:
        raise ArgumentError(f"{who} must be aligned to its dtype's size ({arr.itemsize} "
                            "bytes)", loc, hint="pass a copy: x.copy()")
    if not arr.flags.writeable and written:
        raise ArgumentError(f"{who} is read-only, but the kernel writes it", loc,
                            hint="pass a writable array (x.copy()); arrays the kernel only "
                                 "reads may be read-only")
    return arr


def _plain_array(who: str, arr, loc: Loc) -> np.ndarray:
    """`arr` as a plain ndarray (a view of an ndarray subclass such as np.memmap); masked
    arrays and np.matrix are refused: a kernel sees neither a mask nor matrix indexing."""
    if isinstance(arr, np.ma.MaskedArray):
        raise ArgumentError(f"{who} is a masked array; a kernel reads every element and "
                            "has no use for a mask", loc,
                            hint="pass x.filled(value) (or np.ma.getdata(x) for the raw data)")
    if isinstance(arr, np.matrix):
        raise ArgumentError(f"{who} is an np.matrix; expected an ndarray", loc,
                            hint="pass np.asarray(x)")
    if not isinstance(arr, np.ndarray):
        raise ArgumentError(f"{who} must be a numpy array; got {type(arr).__name__}", loc,
                            hint="convert with np.asarray(x) (torch: x.numpy())")
    return arr if type(arr) is np.ndarray else arr.view(np.ndarray)


@functools.lru_cache(maxsize=None)
def _int_max(dtype: np.dtype) -> int:
    return int(np.iinfo(dtype).max)  # np.iinfo is slow: once per dtype, not per call (perf-log)


def _check_fits(who: str, size: Var, dim: int, got: int, loc: Loc) -> None:
    """A dimension must fit the integer type of the size it binds (int32 by default)."""
    hi = _int_max(size.dtype.np_dtype)
    if got > hi:
        raise ArgumentError(
            f"{who} has {got} elements in dimension {dim}, more than the size {size.name} "
            f"({size.dtype}) can hold (at most {hi})", loc,
            hint=f'declare {size.name} = T.symbolic("{size.name}", "int64") and compute '
                 'indices into that dimension in int64 (e.g. T.cast(bx, "int64") * block)')


def _free_vars(e: Expr, sizes: dict) -> set[str]:
    if isinstance(e, Var):
        return set() if e.name in sizes else {e.name}
    if isinstance(e, Call):
        return set().union(*(_free_vars(a, sizes) for a in e.args))
    return set()


def _bind_derived(func, inputs, args, sizes: dict, loc: Loc) -> None:
    """Dimensions given by expressions (`N * 2`, `T.ceildiv(K, 128)`): solve those that
    are linear in one unbound size, then check every one of them."""
    pending = [(buf, dim, want, got) for buf, arr in zip(inputs, args)
               for dim, (want, got) in enumerate(zip(buf.shape, arr.shape))
               if isinstance(want, Call)]
    progress = True
    while progress:
        progress = False
        for _buf, _dim, want, got in pending:
            free = _free_vars(want, sizes)
            if len(free) == 1:
                name = free.pop()
                b = eval_index(want, {**sizes, name: 0})
                a = eval_index(want, {**sizes, name: 1}) - b
                if a != 0 and (got - b) % a == 0:
                    sizes[name] = (got - b) // a
                    progress = True
    for buf, dim, want, got in pending:
        if _free_vars(want, sizes):
            raise ArgumentError(
                f"{func.name}: cannot tell {', '.join(sorted(_free_vars(want, sizes)))} "
                f"from argument {buf.name} (dimension {dim} is {_fmt(want)} = {got})", loc,
                hint="give that size its own dimension in some argument")
        value = eval_index(want, sizes)
        if value != got:
            raise ArgumentError(
                f"{func.name}: argument {buf.name} expected dimension {dim} to be "
                f"{_fmt(want)} = {value}; got {got}", loc)


def _output_shape(func, buf: Buffer, sizes: dict, loc: Loc) -> tuple[int, ...]:
    try:
        return tuple(eval_index(s, sizes) for s in buf.shape)
    except KeyError as err:
        raise ArgumentError(f"{func.name}: the size {err.args[0]} of output {buf.name} is "
                            "not given by any input", loc,
                            hint="pass the output as an argument instead of using out_idx",
                            ) from None


def _shape_text(buf: Buffer) -> str:
    return "(" + ", ".join(_fmt(s) for s in buf.shape) + ")"


# ------------------------------------------------------------------ decorators


def make_prim_func(fn) -> Kernel:
    """`@T.prim_func`: parameters are annotated T.Tensor(shape, dtype)."""
    src = read_source(fn)
    specs = []
    hints = getattr(fn, "__annotations__", {})
    scalars = []
    for p in inspect.signature(fn).parameters.values():
        spec = hints.get(p.name)
        if isinstance(spec, str) and as_format(spec) is None:
            spec = eval(spec, environment(fn))  # noqa: S307 - the user's own annotation
        if as_format(spec) is not None and as_format(spec).is_float:
            specs.append((p.name, TensorSpec.scalar_param(as_format(spec)), src.loc(src.fn_def)))
            continue  # `scale: T.float32`: a one-element read-only tensor, passed a number
        if as_format(spec) is not None:  # `n: T.int32`: a scalar argument
            scalars.append((len(specs) + len(scalars), p.name, scalar_size(
                p.name, spec, src.loc(src.fn_def))))
            continue
        if not isinstance(spec, TensorSpec):
            raise TileSyntaxError(f"parameter {p.name!r} of {fn.__name__} needs a "
                                  "T.Tensor(shape, dtype) annotation", src.loc(src.fn_def))
        specs.append((p.name, spec, src.loc(src.fn_def)))
    tr = Translator(src, environment(fn), eager=False)
    for _, name, size in scalars:
        tr.bind(name, tr.size_expr(size, src.loc(src.fn_def)))
    body = tr.function(fn.__name__, specs)
    return Kernel(PrimFunc(fn.__name__, tuple(tr.params), tuple(tr.sizes.values()), body,
                           (), src.loc(src.fn_def), **func_attrs(tr),
                           scalars=tuple((i, tr.sizes[n].name) for i, n, _ in scalars)))


def jit(fn=None, *, out_idx=None, empty_outputs=False, **_options):
    """`@tilepy.jit`: a factory returning a `@T.prim_func` (lazy style, with `out_idx`), or
    an eager kernel that declares its tensors in the body and returns its outputs.
    `empty_outputs=True`: the kernel writes every element of its out_idx outputs, so they
    are allocated uninitialised (np.empty) instead of zeroed."""
    if fn is None:
        return lambda f: JitFunction(f, out_idx, empty_outputs)
    return JitFunction(fn, out_idx, empty_outputs)


@api_boundary
def compile(func, out_idx=None, empty_outputs=False, **_options) -> Kernel:  # noqa: A001
    """`tilepy.compile(prim_func, out_idx=[...])` (TileLang's name): a Kernel that
    allocates those outputs (uninitialised with empty_outputs=True, see `jit`)."""
    base = func.func if isinstance(func, Kernel) else func
    return Kernel(base, out_idx if out_idx is not None else (), empty_outputs)


class JitFunction:
    """What `@tilepy.jit` returns. Builds (and caches) one Kernel per build-time args."""

    def __init__(self, fn, out_idx, empty_outputs=False):
        self.fn = fn
        self.out_idx = out_idx
        self.empty_outputs = empty_outputs
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._cache: dict = {}
        self._eager = None

    def __repr__(self) -> str:
        return f"<tilepy.jit {self.fn.__name__}>"

    @property
    def eager(self) -> bool:
        if self._eager is None:
            self._eager = _has_kernel_block(read_source(self.fn).fn_def)
        return self._eager

    @api_boundary
    def __call__(self, *args, **kwargs):
        if not self.eager:
            key = _key(args, kwargs)
            if key not in self._cache:
                made = self.fn(*args, **kwargs)
                if not isinstance(made, Kernel):
                    raise TileSyntaxError(f"{self.fn.__name__} must return a @T.prim_func "
                                          f"kernel; it returned {type(made).__name__}")
                self._cache[key] = compile(made, self.out_idx, self.empty_outputs)
            return self._cache[key]
        kernel, arrays = self._eager_kernel(args, kwargs)
        return kernel(*arrays)

    @api_boundary
    def build(self, *args, **kwargs) -> Kernel:
        """The Kernel for these arguments, without running it (eager style)."""
        if not self.eager:
            return self(*args, **kwargs)
        return self._eager_kernel(args, kwargs)[0]

    def built(self) -> list[Kernel]:
        """The Kernels built so far, one per distinct set of build-time arguments."""
        return list(self._cache.values())

    def array_params(self) -> list[str]:
        """The parameters an eager kernel declares `X: T.Tensor(...)` (its arrays); a lazy
        factory has none."""
        if not self.eager:
            return []
        params = list(inspect.signature(self.fn).parameters)
        return tensor_param_names(read_source(self.fn).fn_def, params)

    def _eager_kernel(self, args, kwargs):
        key, static, arrays = bind_eager(self.fn, args, kwargs)
        consts = const_values(self.fn, static, arrays)  # T.const sizes: one kernel each
        key = (key, tuple(sorted(consts.items())))
        if key not in self._cache:
            self._cache[key] = Kernel(translate_eager(self.fn, static, consts))
        return self._cache[key], arrays


def _key(args, kwargs):
    try:
        key = (args, tuple(sorted(kwargs.items())))
        hash(key)
        return key
    except TypeError:
        return repr((args, kwargs))


def _has_kernel_block(fn_def: ast.FunctionDef) -> bool:
    """True when T.Kernel appears in the function itself (not in a nested def)."""
    todo = list(fn_def.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.With):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False
