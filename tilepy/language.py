"""`import tilepy.language as T`: the names a kernel is written with (TileLang's surface).

Each tile-language function is a `Builtin` that the front end recognises by identity inside
a kernel; called from plain Python it raises a clear error (except build-time ones such as
`T.ceildiv` on ints). No semantics here: frontend/ builds IR, the op table defines values.
"""

from __future__ import annotations

from typing import Any, Callable

from tilepy.boundary import api_boundary
from tilepy.frontend.annotations import HINTS as _HINTS
from tilepy.frontend.dtypes import dtype
from tilepy.frontend.externs import NAMES as _EXTERNS
from tilepy.frontend.extras import NOT_PORTABLE as _NOT_PORTABLE
from tilepy.frontend.simt import NAMES as _SIMT
from tilepy.frontend.surface import Builtin, SizeExpr, SymbolicSize, TensorSpec  # noqa: F401
from tilepy.ir.ops import SURFACE
from tilepy.kernel import make_prim_func as _make_prim_func
from tilepy.precision.formats import FORMATS, get_format


def _cast_literal(dt, value):
    """`T.Cast(dtype, 5)` on build-time values (in a helper): a literal of that dtype."""
    from tilepy.errors import NOLOC
    from tilepy.frontend.exprs import make_const
    from tilepy.ir.types import dtype as ir_dtype

    return make_const(value, ir_dtype(str(dt)), NOLOC)


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


# dtypes, under ml_dtypes' names and TileLang's short ones: strings ("float32" == T.float32)
for _name in FORMATS:
    globals()[_name] = dtype(_name)
float8_e4m3 = dtype("float8_e4m3fn")
float4_e2m1 = dtype("float4_e2m1fn")
float8_e8m0 = dtype("float8_e8m0fnu")
bf16 = dtype("bfloat16")
fp16 = dtype("float16")
fp32 = dtype("float32")
int_ = dtype("int32")
float_ = dtype("float32")
globals()["float"] = dtype("float32")  # TileLang's T.float, T.int, T.bool
globals()["int"] = dtype("int32")
globals()["bool"] = dtype("bool")
ptr = dtype("int64")  # T.ptr: a table of addresses (tensor.data_ptr()), for T.make_tensor


def _builtins(names: str, python: dict[str, Callable[..., Any]] | None = None) -> None:
    for name in names.split():
        globals()[name] = Builtin(name, (python or {}).get(name))


# launch, buffers, loops
_builtins("Kernel alloc_shared alloc_fragment alloc_local alloc_var empty const")
_builtins("Parallel Pipelined serial unroll grid")
# TVMScript's `with T.If(c):` / `T.Then()` / `T.Else()` frames, persistent loops, blockIdx
_builtins("If Then Else Persistent get_block_binding PersistentKernel")
_builtins("While")  # TVMScript's `with T.While(cond):` frame
# tile ops
_builtins("copy gemm clear fill reduce_sum reduce_max reduce_min reduce_abssum reduce_absmax")
_builtins("cumsum atomic_add print")
# scalar ops: every surface name of the op table (ir/ops.py), and two that build other ops
_builtins(" ".join(SURFACE) + " infinity ceildiv", {"ceildiv": _ceildiv})

# annotations: safe values of global buffers, and hardware-only hints (recorded, not run)
_builtins("annotate_safe_value " + " ".join(_HINTS))

# other spellings of tilepy's names, and GPU-only features (refused: not portable)
_builtins("Cast", {"Cast": _cast_literal})
_builtins("clamp alloc_buffer make_tensor sync_grid atomic_addx2 atomic_addx4 reshape view "
          "alloc_global im2col c2d_im2col gemm_v1 gemm_v2 "
          + " ".join(_NOT_PORTABLE))
# thread-level (SIMT) programming: thread indices, barriers, warp shuffles, allreduce
_builtins(" ".join(_SIMT) + " vectorized")
# TileLang's inline CUDA helpers: the decode helpers of tilelang.quantize (frontend/externs.py)
_builtins(_EXTERNS)
parallel = globals()["Parallel"]
SharedBuffer = FragmentBuffer = LocalBuffer = Tensor  # annotations of @T.macro parameters
SharedTensor = FragmentTensor = LocalTensor = Tensor  # TileLang's other spelling of them


class GemmWarpPolicy:
    """TileLang's warp partition of a gemm: a GPU schedule choice, accepted and ignored."""

    Square, FullRow, FullCol = 0, 1, 2


class Layout:
    """A memory layout (`T.annotate_layout`): recorded as text, never applied."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


Fragment = Layout


def make_swizzled_layout(buffer, *args, **kwargs) -> Layout:
    """TileLang's swizzled shared-memory layout: a hint with no CPU meaning."""
    return Layout(buffer, *args, **kwargs)


__all__ = [n for n in list(globals()) if not n.startswith("_")]  # noqa: PLE0605
