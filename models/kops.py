"""Array-level ops for the autograd: each computes with a tile kernel (models/kernels or
tilepy/kernels) on the current backend; numpy here only allocates, reshapes, transposes
and materialises broadcasts (data movement, no arithmetic).
"""

from __future__ import annotations

import math

import numpy as np

from tilepy.kernels.gemm import gemm
from tilepy.kernels.reductions import row_reduce
from tilepy.models.kernels import elementwise as E
from tilepy.models.kernels import gelu as G
from tilepy.models.kernels.launch import fast_mode, launch, set_grain
from tilepy.models.kernels.record import contiguous
from tilepy.models.kernels.reduce import mid_sum

_CODES: dict[int, np.ndarray] = {}


def code(c: int) -> np.ndarray:
    """A one-element int32 op-code array (cached: kernels only read it)."""
    arr = _CODES.get(c)
    if arr is None:
        arr = _CODES[c] = np.array([c], np.int32)
        arr.flags.writeable = False
    return arr


_KERNELS: dict = {}  # (factory, build arguments) -> Kernel, skipping @tilepy.jit's lookup
_PARAMS: dict = {}  # (a, b, dtype) -> the read-only parameter array of unary kernels


# Kernels whose launches stay on one thread up to more elements than launch.GRAIN: a row
# broadcast (bias add) reads what the launch before wrote on this thread; at 2^17-2^18
# elements a second thread cost more (moving the rows to the other core's cache, waking
# it) than it saved (docs/models.md, the transformer step's fifth pass)
_GRAIN_OF = {E.binary_rows: 1 << 19}


def kernel(factory, **build):
    """The Kernel `factory(**build)`, cached here (the hot path of every op)."""
    key = (factory, *build.items())
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = factory(**{name: v.name if isinstance(v, np.dtype) else v
                                        for name, v in build.items()})
        if factory in _GRAIN_OF:
            set_grain(k, _GRAIN_OF[factory])
    return k


def params(a: float, b: float, dtype) -> np.ndarray:
    key = (a, b, dtype)
    arr = _PARAMS.get(key)
    if arr is None:
        if len(_PARAMS) > 4096:
            _PARAMS.clear()
        arr = _PARAMS[key] = np.array([a, b], dtype)
        arr.flags.writeable = False
    return arr


_CACHED: dict = {}  # (kind, shape or values, dtype) -> a read-only array


def _cached(key: tuple, make) -> np.ndarray:
    """The read-only array cached under `key` (made by `make()` on first use): a captured
    step then reads the same array every call."""
    arr = _CACHED.get(key)
    if arr is None:
        if len(_CACHED) > 512:
            _CACHED.clear()
        arr = _CACHED[key] = make()
        arr.flags.writeable = False
    return arr


def ones(shape: tuple, dtype) -> np.ndarray:
    """A read-only array of ones (cached: the same array every step)."""
    return _cached(("ones", shape, np.dtype(dtype)), lambda: np.ones(shape, dtype))


def zeros(shape: tuple, dtype) -> np.ndarray:
    """A read-only array of zeros (cached: the same array every step)."""
    return _cached(("zeros", shape, np.dtype(dtype)), lambda: np.zeros(shape, dtype))


def const(values: tuple, dtype) -> np.ndarray:
    """A read-only 1-d array of `values` (cached by value: the same array every step)."""
    values = tuple(values)
    return _cached(("const", values, np.dtype(dtype)), lambda: np.array(values, dtype))


def flat(a: np.ndarray) -> np.ndarray:
    return contiguous(a).reshape(-1)


_NAMES: dict = {}


def dtype_name(dtype: np.dtype) -> str:
    """dtype.name, cached per dtype (numpy computes the name in Python, a few us a call)."""
    n = _NAMES.get(dtype)
    if n is None:
        n = _NAMES[dtype] = dtype.name
    return n


_COMPUTE: dict = {}


def compute(dtype) -> np.dtype:
    """The dtype kernels compute in for `dtype` storage (float32 for bfloat16, float16)."""
    c = _COMPUTE.get(dtype)
    if c is None:
        c = _COMPUTE[dtype] = np.dtype(E.compute_dtype(np.dtype(dtype).name))
    return c


def convert(x: np.ndarray, dtype) -> np.ndarray:
    """x in `dtype` (the `convert` kernel; x itself when it has that dtype already)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    out = np.empty(x.shape, dtype)
    launch(kernel(E.convert, src=x.dtype, dst=dtype), flat(x), out.reshape(-1))
    return out


def unary(x: np.ndarray, op: str, a: float = 1.0, b: float = 0.0) -> np.ndarray:
    out = np.empty(x.shape, x.dtype)
    launch(kernel(E.unary, dtype=x.dtype), flat(x), code(E.UNARY[op]),
           params(a, b, compute(x.dtype)), out.reshape(-1))
    return out


def unary_bwd(x, y, g, op: str, a: float = 1.0) -> np.ndarray:
    out = np.empty(x.shape, x.dtype)
    launch(kernel(E.unary_bwd, dtype=x.dtype), flat(x), flat(y), flat(g), code(E.UNARY[op]),
           params(a, 0.0, compute(x.dtype)), out.reshape(-1))
    return out


def gelu(x: np.ndarray) -> tuple:
    """(gelu(x), the normal CDF at x in the compute dtype) for gelu_bwd: unary's bits."""
    out, cdf = np.empty(x.shape, x.dtype), np.empty(x.shape, compute(x.dtype))
    launch(kernel(G.gelu_fwd, dtype=x.dtype), flat(x), out.reshape(-1), cdf.reshape(-1))
    return out, cdf


def gelu_bias(h: np.ndarray, b: np.ndarray) -> tuple:
    """(gelu(h + b), its CDF) for a 2-d h and b of shape (h.shape[1],), with h + b
    written into h (gelu_bwd's x): binary's then gelu()'s bits, in one launch."""
    out, cdf = np.empty(h.shape, h.dtype), np.empty(h.shape, compute(h.dtype))
    launch(kernel(G.gelu_bias_fwd, dtype=h.dtype), h, contiguous(b), out, cdf)
    return out, cdf


def gelu_bwd(x: np.ndarray, cdf: np.ndarray, g: np.ndarray) -> np.ndarray:
    """unary_bwd(x, _, g, "gelu")'s bits, reading gelu()'s CDF instead of an erf."""
    out = np.empty(x.shape, x.dtype)
    launch(kernel(G.gelu_bwd, dtype=x.dtype), flat(x), cdf.reshape(-1), flat(g),
           out.reshape(-1))
    return out


def broadcast(a: np.ndarray, shape: tuple) -> np.ndarray:
    """`a` materialised at `shape` (a contiguous copy when it broadcasts)."""
    if a.shape == tuple(shape):
        return contiguous(a)
    return contiguous(np.broadcast_to(a, shape))


_SHAPES: dict = {}  # (shape, shape) -> their broadcast shape


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """np.broadcast_shapes(a, b), cached per pair (it costs a few us a call)."""
    s = _SHAPES.get((a, b))
    if s is None:
        if len(_SHAPES) > 4096:
            _SHAPES.clear()
        s = _SHAPES[(a, b)] = np.broadcast_shapes(a, b)
    return s


def binary(x: np.ndarray, y: np.ndarray, op: str, out: np.ndarray | None = None):
    """x op y with numpy broadcasting; `out` may be x itself (in-place accumulation)."""
    if x.shape == y.shape:
        shape = x.shape
        xs, ys = contiguous(x), contiguous(y)
    elif y.ndim == 1 and x.ndim > 1 and y.shape[0] == x.shape[-1]:
        return _binary_rows(x, y, op, out)
    else:
        shape = broadcast_shapes(x.shape, y.shape)
        xs, ys = broadcast(x, shape), broadcast(y, shape)
    if out is None:
        out = np.empty(shape, x.dtype)
    launch(kernel(E.binary, dtype=x.dtype), xs.reshape(-1), ys.reshape(-1),
           code(E.BINARY[op]), out.reshape(-1))
    return out


def _binary_rows(x: np.ndarray, y: np.ndarray, op: str, out: np.ndarray | None):
    """x op y for y of shape (x.shape[-1],) (a bias, a norm's weight): y is not
    materialised at x's shape; the kernel reads it once per tile (binary's formula per
    element, so exact mode's bits are those of the broadcast copy)."""
    if out is None:
        out = np.empty(x.shape, x.dtype)
    n = x.shape[-1]
    launch(kernel(E.binary_rows, dtype=x.dtype), contiguous(x).reshape(-1, n),
           contiguous(y), code(E.BINARY[op]), out.reshape(-1, n))
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) @ (K, N) with the library gemm (k ascending; accumulation in the compute
    dtype: float32 for bfloat16/float16 operands, rounded once into their dtype).
    In fast mode an operand that is the transpose of a contiguous array (w.T, x.T) goes
    in as that array with the gemm's transpose flag (one BLAS call reads it in place);
    exact mode copies it, keeping one gemm kernel."""
    d = a.dtype
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    build = {"in_dtype": d, "out_dtype": d, "accum_dtype": compute(d)}
    if fast_mode():
        if _transposed(a):
            a, build["trans_A"] = a.T, True
        if _transposed(b):
            b, build["trans_B"] = b.T, True
    launch(kernel(gemm, **build), contiguous(a), contiguous(b), out)
    return out


def _transposed(a: np.ndarray) -> bool:
    """Whether `a` (2-d) is the transpose of a C-contiguous array but not itself one."""
    return not a.flags.c_contiguous and a.T.flags.c_contiguous


def row_reduce2d(x: np.ndarray, kind: str) -> np.ndarray:
    """Reduce each row of a 2-d array (library row_reduce: j ascending; narrow dtypes
    accumulate in float32 and round once)."""
    c = compute(x.dtype)
    out = np.empty((x.shape[0],), c)
    # rows of at most 16 (a mean over a few tokens) in 32 x 16 tiles: the default 8 x 256
    # tile is 15/16 padding; the padding comes after the row's elements (the same bits)
    tiles = {"block_M": 32, "block_N": 16} if x.shape[1] <= 16 else {}
    launch(kernel(row_reduce, kind=kind, dtype=x.dtype, out_dtype=c, **tiles),
           contiguous(x), out)
    return convert(out, x.dtype)


def _move_last(x: np.ndarray, axes: tuple) -> np.ndarray:
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = contiguous(np.transpose(x, keep + list(axes)))
    rows = math.prod([x.shape[i] for i in keep])
    return moved.reshape(rows, -1)


MID_SUM_COLUMNS = 32  # trailing elements from which a middle-axis sum is read in place


def _mid_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum over one middle axis with row_reduce2d(_move_last(...))'s bits, reading x
    in place (no transposed copy): kernels/reduce.py mid_sum."""
    c = compute(x.dtype)
    x3 = contiguous(x).reshape(math.prod(x.shape[:axis]), x.shape[axis], -1)
    out = np.empty((x3.shape[0], x3.shape[2]), c)
    launch(kernel(mid_sum, dtype=x.dtype, out_dtype=c), x3, out)
    return convert(out, x.dtype)


def reduce(x: np.ndarray, axes: tuple, kind: str, keepdims: bool) -> np.ndarray:
    """sum or max over `axes` (a tuple of non-negative axes), via row reductions; in fast
    mode a sum over leading axes (a bias's gradient) is a row of ones times x as a matrix,
    one BLAS call instead of a transposed copy and a row reduction."""
    k = len(axes)
    if kind == "sum" and 0 < k < x.ndim and axes == tuple(range(k)) and fast_mode():
        x2 = contiguous(x).reshape(-1, math.prod(x.shape[k:]))
        out = matmul(ones((1, x2.shape[0]), x.dtype), x2)
    elif kind == "sum" and k == 1 and 0 < axes[0] < x.ndim - 1 and \
            math.prod(x.shape[axes[0] + 1:]) >= MID_SUM_COLUMNS:
        out = _mid_sum(x, axes[0])
    else:
        out = row_reduce2d(_move_last(x, axes), kind)
    shape = [1 if i in axes else n for i, n in enumerate(x.shape)]
    if not keepdims:
        shape = [n for i, n in enumerate(x.shape) if i not in axes]
    return out.reshape(shape)


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """The gradient of a broadcast: `g` summed back to `shape`."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    return reduce(g, axes, "sum", keepdims=True).reshape(shape)
