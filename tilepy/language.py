"""`import tilepy.language as T`: the names a kernel is written with (TileLang's surface).

Each tile-language function is a `Builtin` that the front end recognises by identity inside
a kernel; called from plain Python it raises a clear error (except build-time ones such as
`T.ceildiv` on ints). No semantics here: frontend/ builds IR, the op table defines values.
"""

from __future__ import annotations

from typing import Any, Callable

from tilepy.boundary import api_boundary
from tilepy.frontend.annotations import HINTS as _HINTS
from tilepy.frontend.surface import Builtin, SizeExpr, SymbolicSize, TensorSpec  # noqa: F401
from tilepy.ir.ops import SURFACE
from tilepy.kernel import make_prim_func as _make_prim_func
from tilepy.precision.formats import FORMATS, Format, get_format


def _ceildiv(a, b):
    return (a + b - 1) // b


def symbolic(name: str, dtype: str = "int32") -> SymbolicSize:
    """A symbolic size, bound from the arrays' shapes at each call."""
    return SymbolicSize(name, get_format(dtype))


dynamic = symbolic


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
    return _make_prim_func(fn)


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

# annotations: safe values of global buffers, and hardware-only hints (recorded, not run)
_builtins("annotate_safe_value " + " ".join(_HINTS))

__all__ = [n for n in list(globals()) if not n.startswith("_")]  # noqa: PLE0605
