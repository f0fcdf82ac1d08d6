"""`import tilepy.language as T`: the names a kernel is written with (TileLang's surface).

Each tile-language function here is a `Builtin`: inside a kernel the front end recognises
it by identity and builds IR; called from plain Python it raises a clear error (except the
few that also make sense at build time, such as `T.ceildiv` on ints). This module holds no
semantics: tilepy/frontend/ turns calls into IR and the op table defines what they compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tilepy.boundary import api_boundary
from tilepy.errors import TileSyntaxError
from tilepy.ir.ops import SURFACE
from tilepy.precision.formats import FORMATS, Format, get_format


class Builtin:
    """A tile-language function; `python` (optional) is its meaning on build-time values."""

    def __init__(self, name: str, python: Callable[..., Any] | None = None):
        self.name = name
        self.python = python

    def __repr__(self) -> str:
        return f"T.{self.name}"

    @api_boundary
    def __call__(self, *args, **kwargs):
        from tilepy.frontend.traced import Traced, traced_builtin

        if any(isinstance(a, Traced) for a in (*args, *kwargs.values())):
            return traced_builtin(self.name, args, kwargs)
        if self.python is not None:
            return self.python(*args, **kwargs)
        raise TileSyntaxError(
            f"T.{self.name} can only be used inside a kernel body",
            hint="write it inside a @T.prim_func / @tilepy.jit function",
        )


def _ceildiv(a, b):
    return (a + b - 1) // b


@dataclass(frozen=True)
class SymbolicSize:
    """A size named at build time and bound when the kernel is called (`T.symbolic("M")`)."""

    name: str
    dtype: Format = FORMATS["int32"]

    def __repr__(self) -> str:
        return self.name


class SizeExpr:
    """Arithmetic on symbolic sizes before a kernel body exists (`T.Tensor((M * 2,), ...)`):
    recorded here, turned into IR by the front end."""

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args

    def __repr__(self) -> str:
        return f"({self.args[0]!r} {self.op} {self.args[1]!r})"


def _size_op(op: str, swap: bool = False):
    def method(self, other):
        if not isinstance(other, (int, SymbolicSize, SizeExpr)):
            return NotImplemented
        return SizeExpr(op, (other, self) if swap else (self, other))

    return method


for _cls in (SymbolicSize, SizeExpr):
    for _op, _name in (("+", "add"), ("-", "sub"), ("*", "mul"), ("//", "floordiv"),
                       ("%", "mod")):
        setattr(_cls, f"__{_name}__", _size_op(_op))
        setattr(_cls, f"__r{_name}__", _size_op(_op, swap=True))


def symbolic(name: str, dtype: str = "int32") -> SymbolicSize:
    """A symbolic size, bound from the arrays' shapes at each call."""
    return SymbolicSize(name, get_format(dtype))


dynamic = symbolic


class TensorSpec:
    """`T.Tensor(shape, dtype)`: a kernel parameter (or, with `data`, a re-view)."""

    def __init__(self, shape, dtype="float32", data=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = get_format(dtype)
        self.data = data

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype})"


class _TensorType:
    """`T.Tensor((M, K), dtype)` and `T.Tensor[[M, K], dtype]` both give a TensorSpec."""

    def __call__(self, shape, dtype="float32", data=None) -> TensorSpec:
        return TensorSpec(shape, dtype, data)

    def __getitem__(self, item) -> TensorSpec:
        shape, dtype = item if isinstance(item, tuple) and len(item) == 2 else (item, "float32")
        return TensorSpec(shape, dtype)

    def __repr__(self) -> str:
        return "T.Tensor"


Tensor = _TensorType()
Buffer = Tensor


@api_boundary
def prim_func(fn):
    """Turn a kernel function into a `Kernel` (its IR is built now, from its source)."""
    from tilepy.kernel import make_prim_func

    return make_prim_func(fn)


def macro(fn):
    """Mark a helper whose body is inlined into the calling kernel."""
    fn.__tilepy_macro__ = True
    return fn


# dtypes, under ml_dtypes' names and TileLang's short ones
for _name, _fmt in FORMATS.items():
    globals()[_name] = _fmt
float8_e4m3 = FORMATS["float8_e4m3fn"]
float4_e2m1 = FORMATS["float4_e2m1fn"]
float8_e8m0 = FORMATS["float8_e8m0fnu"]
bf16 = FORMATS["bfloat16"]
fp16 = FORMATS["float16"]
fp32 = FORMATS["float32"]
int_ = FORMATS["int32"]
float_ = FORMATS["float32"]
dtype = Format


def _builtins(names: str, python: dict[str, Callable[..., Any]] | None = None) -> None:
    for name in names.split():
        globals()[name] = Builtin(name, (python or {}).get(name))


# launch, buffers, loops
_builtins("Kernel alloc_shared alloc_fragment alloc_local alloc_var empty const")
_builtins("Parallel Pipelined serial unroll")
# tile ops
_builtins("copy gemm clear fill reduce_sum reduce_max reduce_min reduce_abssum reduce_absmax")
_builtins("cumsum atomic_add print")
# scalar ops: every surface name of the op table (ir/ops.py), and two that build other ops
_builtins(" ".join(SURFACE) + " infinity ceildiv", {"ceildiv": _ceildiv})

__all__ = [n for n in list(globals()) if not n.startswith("_")]  # noqa: PLE0605
