"""A tile op's signature: `Tensor[M, K]` annotations, the symbolic sizes they name, and the
global buffers they become.

`Tensor[M, K]` is float32; a dtype last (`Tensor[M, K, "float16"]`) sets another. Sizes are
`symbolic(...)` names (bound from the arguments' shapes at each call), ints, or `+ - * // %`
of these. Builds no kernel and checks no arrays.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from tilepy.errors import Loc, TileSyntaxError, TileTypeError
from tilepy.frontend import exprs
from tilepy.frontend.source import Source, environment
from tilepy.frontend.surface import SizeExpr, SymbolicSize, TensorSpec
from tilepy.ir.expr import Buffer, Expr, Var
from tilepy.ir.ops import Op
from tilepy.precision.formats import Format, UnknownFormatError, get_format


def symbolic(name: str, dtype: str = "int32") -> SymbolicSize:
    """A size bound from the arguments' shapes at each call (`T.symbolic`)."""
    return SymbolicSize(name, get_format(dtype))


@dataclass(frozen=True)
class OpTensor:
    """One annotation: the shape (ints, symbolic sizes, size expressions) and the dtype."""

    shape: tuple
    dtype: Format

    def __repr__(self) -> str:
        dims = ", ".join(repr(s) for s in self.shape)
        return f"Tensor[{dims}, {str(self.dtype)!r}]"


class _TensorType:
    """`Tensor[M, K]` (float32) or `Tensor[M, K, "bfloat16"]`."""

    def __getitem__(self, item) -> OpTensor:
        items = list(item) if isinstance(item, tuple) else [item]
        dt = get_format("float32")
        if items and isinstance(items[-1], (str, Format)):
            dt = _dtype(items.pop())
        for s in items:
            if not isinstance(s, (int, SymbolicSize, SizeExpr)) or isinstance(s, bool):
                raise TileTypeError(f"a Tensor dimension must be an int or a symbolic size; "
                                    f"got {s!r}", hint='M = tilepy.symbolic("M")')
        return OpTensor(tuple(items), dt)

    def __repr__(self) -> str:
        return "Tensor"


Tensor = _TensorType()


def _dtype(x) -> Format:
    try:
        return get_format(x)
    except (UnknownFormatError, TypeError):
        raise TileTypeError(f"unknown dtype {x!r} in a Tensor annotation",
                            hint='write Tensor[M, N, "float16"]') from None


@dataclass
class Signature:
    """Parameters and outputs as global buffers, the sizes they name, and where each
    annotation is (for messages)."""

    params: list[Buffer]
    outputs: list[Buffer]
    sizes: dict[str, Var]
    param_locs: list[Loc]
    output_locs: list[Loc]


def read_signature(fn, src: Source) -> Signature:
    """The tile op's signature, from its annotations (strings are evaluated)."""
    env = environment(fn)
    hints = getattr(fn, "__annotations__", {})
    node = src.fn_def
    sizes: dict[str, Var] = {}
    sig = Signature([], [], sizes, [], [])
    params = list(inspect.signature(fn).parameters.values())
    for p, arg in zip(params, node.args.args):
        loc = src.loc(arg.annotation or arg)
        spec = _as_tensor(_evaluated(hints.get(p.name), env, loc), loc,
                          f"parameter {p.name!r} of {fn.__name__}")
        sig.params.append(Buffer(p.name, _shape(spec, sizes, loc, True), spec.dtype))
        sig.param_locs.append(loc)
    ret = hints.get("return")
    if ret is None:
        raise TileSyntaxError(f"{fn.__name__} needs a return annotation: the output's "
                              "Tensor[...] (or a tuple of them)", src.loc(node),
                              hint="def op(a: Tensor[M, K], ...) -> Tensor[M, N]:")
    ret = _evaluated(ret, env, src.loc(node.returns))
    outs = list(getattr(ret, "__args__", None) or ret) if not isinstance(ret, OpTensor) \
        else [ret]
    out_nodes = node.returns.elts if isinstance(node.returns, ast.Tuple) else \
        [node.returns] * len(outs)
    for n, (spec, out_node) in enumerate(zip(outs, out_nodes)):
        loc = src.loc(out_node)
        spec = _as_tensor(spec, loc, f"output {n} of {fn.__name__}")
        name = "out" if len(outs) == 1 else f"out{n}"
        sig.outputs.append(Buffer(name, _shape(spec, sizes, loc, False), spec.dtype))
        sig.output_locs.append(loc)
    return sig


def _evaluated(spec, env: dict, loc: Loc):
    if isinstance(spec, str):  # `from __future__ import annotations`
        try:
            return eval(spec, env)  # noqa: S307 - the user's own annotation
        except Exception as err:  # noqa: BLE001 - reported at the annotation
            raise TileSyntaxError(f"cannot evaluate the annotation {spec!r}: {err}", loc) \
                from None
    return spec


def _as_tensor(spec, loc: Loc, who: str) -> OpTensor:
    if isinstance(spec, OpTensor):
        return spec
    if isinstance(spec, TensorSpec):  # T.Tensor((M, K), dtype) works too
        return OpTensor(spec.shape, spec.dtype)
    raise TileSyntaxError(f"{who} needs a Tensor[...] annotation; got {spec!r}", loc,
                          hint='annotate it as Tensor[M, K] or Tensor[M, K, "float16"]')


def _shape(spec: OpTensor, sizes: dict[str, Var], loc: Loc, is_input: bool) -> tuple:
    return tuple(size_expr(s, sizes, loc, is_input) for s in spec.shape)


_SIZE_OPS = {"+": Op.ADD, "-": Op.SUB, "*": Op.MUL, "//": Op.FLOORDIV, "%": Op.MOD}


def size_expr(s, sizes: dict[str, Var], loc: Loc, bind: bool) -> Expr:
    """A size as an IR expression. `bind`: an input's annotation may name a new size; an
    output's (or a range's) may only use sizes the inputs bind."""
    if isinstance(s, SymbolicSize):
        if s.name not in sizes:
            if not bind:
                raise TileSyntaxError(
                    f"the size {s.name} is never bound: no argument's annotation has it",
                    loc, hint=f"give some argument a Tensor[..., {s.name}, ...] annotation, "
                              "or write the size from the arguments' sizes")
            sizes[s.name] = Var(s.name, s.dtype)
        return sizes[s.name]
    if isinstance(s, SizeExpr):
        args = [size_expr(a, sizes, loc, bind) for a in s.args]
        return exprs.call(_SIZE_OPS[s.op], args, loc)
    if isinstance(s, int) and not isinstance(s, bool):
        return exprs.index_expr(s, loc)
    raise TileTypeError(f"a size must be an int or a symbolic size; got {s!r}", loc)


__all__ = ["OpTensor", "Signature", "Tensor", "read_signature", "size_expr", "symbolic"]
