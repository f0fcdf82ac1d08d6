"""Eager-style `@tilepy.jit` kernels: tensors declared in the body, outputs returned, as in
`def gemm(A, B, block_M: int = 64): M, N, K = T.const("M, N, K"); A: T.Tensor((M, K), dt);
C = T.empty((M, N), dt); with T.Kernel(...): ...; return C`. Parameters annotated in the
body are each call's arrays; the others are build-time values, and each distinct set of
them builds (and caches) one Kernel.
"""

from __future__ import annotations

import ast
import inspect
import weakref

from tilepy.errors import ArgumentError, TilepyError, TileSyntaxError
from tilepy.frontend.annotations import func_attrs
from tilepy.frontend.source import environment, read_source
from tilepy.frontend.translate import Translator
from tilepy.ir.expr import Buffer
from tilepy.ir.stmt import PrimFunc


def tensor_param_names(fn_def: ast.FunctionDef, params: list[str]) -> list[str]:
    """Parameters declared `X: T.Tensor(...)` in the body, in signature order."""
    declared = {
        st.target.id for st in fn_def.body
        if isinstance(st, ast.AnnAssign) and st.value is None
        and isinstance(st.target, ast.Name)
    }
    return [p for p in params if p in declared]


def bind_eager(fn, args, kwargs) -> tuple[tuple, dict, list]:
    """A call of eager kernel `fn`, split into the key of its build-time values, those values
    by name, and its arrays in declaration order."""
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as err:
        raise ArgumentError(f"{fn.__name__}(): {err}") from None
    bound.apply_defaults()
    tensors = tensor_param_names(read_source(fn).fn_def, list(sig.parameters))
    static = {k: v for k, v in bound.arguments.items() if k not in tensors}
    key = tuple(sorted((k, repr(v)) for k, v in static.items()))
    return key, static, [bound.arguments[name] for name in tensors]


def const_values(fn, static: dict, arrays: list) -> dict[str, int]:
    """The `T.const` sizes the call's arrays give: a size named bare in a declared tensor's
    shape (`A: T.Tensor((M, K), dt)`, or a shape built in a variable) takes that dimension
    of the argument. Each distinct set of values builds its own kernel, so the sizes are
    compile-time constants there."""
    out = _declared_sizes(fn, static, arrays)
    dims = _probe_dims(fn, static, out)
    tensors = [p for p in inspect.signature(fn).parameters if p not in static]
    given = dict(zip(tensors, arrays))
    for name, (param, d) in dims.items():
        shape = getattr(given.get(param), "shape", None)
        if name not in out and shape is not None and d < len(shape):
            out[name] = int(shape[d])
    return out


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _probe_dims(fn, static: dict, known: dict) -> dict[str, tuple[str, int]]:
    """Where each `T.const` size the source scan did not bind is declared: one translation
    with those sizes symbolic, read up to its tensor declarations (which precede the
    kernel; an error after them is the symbolic sizes' and is dropped). Cached per
    function and build-time values."""
    key = (tuple(sorted((k, repr(v)) for k, v in static.items())), tuple(sorted(known)))
    cache = _PROBED.setdefault(fn, {})
    if key not in cache:
        src = read_source(fn)
        tr = Translator(src, environment(fn), eager=True)
        tr.eager_params = {p for p in inspect.signature(fn).parameters if p not in static}
        tr.const_values = {n: 1 for n in known}  # values do not matter here, only names
        for name, value in static.items():
            tr.bind(name, value)
        try:
            tr.function(fn.__name__, [])
        except TilepyError:
            pass
        cache[key] = dict(tr.const_dims)
    return cache[key]


def _declared_sizes(fn, static: dict, arrays: list) -> dict[str, int]:
    """Sizes named bare in a literal shape of a declared tensor (`A: T.Tensor((M, K), dt)`)."""
    fn_def = read_source(fn).fn_def
    tensors = [p for p in inspect.signature(fn).parameters if p not in static]
    given = dict(zip(tensors, arrays))
    out: dict[str, int] = {}
    for st in fn_def.body:
        if not (isinstance(st, ast.AnnAssign) and st.value is None
                and isinstance(st.target, ast.Name) and st.target.id in given
                and isinstance(st.annotation, ast.Call) and st.annotation.args
                and isinstance(st.annotation.args[0], (ast.Tuple, ast.List))):
            continue
        shape = getattr(given[st.target.id], "shape", None)
        if shape is None:
            continue
        for d, dim in enumerate(st.annotation.args[0].elts):
            if isinstance(dim, ast.Name) and d < len(shape) and dim.id not in out:
                out[dim.id] = int(shape[d])
    return out


def translate_eager(fn, static: dict, consts: dict | None = None) -> PrimFunc:
    """The PrimFunc of eager kernel `fn` for the build-time values `static` and the
    `T.const` sizes `consts`: its declared tensors first, then the tensors it returns
    (its `out_idx`)."""
    src = read_source(fn)
    tensors = [p for p in inspect.signature(fn).parameters if p not in static]
    tr = Translator(src, environment(fn), eager=True)
    tr.eager_params = set(tensors)
    tr.const_values = dict(consts or {})
    for name, value in static.items():
        tr.bind(name, value)
    body = tr.function(fn.__name__, [])
    scratch = list(getattr(tr, "scratch", ()))
    inputs = [b for b in tr.params if b not in tr.outputs and b not in scratch]
    order = {name: i for i, name in enumerate(tensors)}
    inputs.sort(key=lambda b: order.get(b.name, len(order)))
    missing = [t for t in tensors if t not in {b.name for b in inputs}]
    if missing:
        raise TileSyntaxError(f"{fn.__name__}: parameter {missing[0]!r} is not declared",
                              src.loc(src.fn_def))
    outputs = _returned_outputs(tr.returned, tr.outputs)
    params = tuple(inputs) + tuple(outputs) + tuple(scratch)
    out_idx = tuple(range(len(inputs), len(params) - len(scratch)))
    attrs = {**func_attrs(tr), "scratch": tuple(range(len(params) - len(scratch), len(params)))}
    return PrimFunc(fn.__name__, params, tuple(tr.sizes.values()), body, out_idx,
                    src.loc(src.fn_def), **attrs)


def _returned_outputs(returned, outputs: list[Buffer]) -> list[Buffer]:
    if returned is None:
        return outputs
    items = returned if isinstance(returned, tuple) else (returned,)
    ordered = [b for b in items if isinstance(b, Buffer) and b in outputs]
    return ordered + [b for b in outputs if b not in ordered]
