"""The differentiable ops on Tensors: elementwise arithmetic with broadcasting, matmul,
activations, reductions and shape ops. Each records a graph node whose backward, like its
forward, computes with tile kernels (models/kops.py); shape ops only move data.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import autograd
from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import record as hooks
from tilepy.models.kernels.elementwise import NARROW  # computed in float32, rounded once
from tilepy.models.kernels.record import contiguous, copy_into
from tilepy.models.promote import category, result_type
from tilepy.models.tensor import Tensor

FLOATS = ("float32", "float64", "bfloat16", "float16")  # dtypes tensors compute in


def as_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    dtype = like.dtype if like is not None else None
    return Tensor(np.asarray(x, dtype=dtype))


def record(data: np.ndarray, parents: tuple, backward, name: str) -> Tensor:
    """The output tensor of an op; it carries a graph node when a parent needs a grad."""
    out = Tensor(data)
    if autograd.is_grad_enabled() and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._node = autograd.Node(backward, parents, name)
    return out


def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    """What torch refuses to promote (matmul, linear): one dtype, a float."""
    if a.dtype != b.dtype:
        raise model_error(f"{op}: operands have dtypes {a.dtype} and {b.dtype}",
                          hint="convert one: x.to(y.dtype) (torch's matmul does not "
                               "promote either)")
    _floating(op, a.dtype)


def _floating(op: str, dtype) -> None:
    if K.dtype_name(dtype) not in FLOATS:
        raise model_error(f"{op}: expected float32, float64, bfloat16 or float16 tensors; "
                          f"got {dtype}", hint="convert it: x.float()")


def promoted(op: str, *tensors) -> tuple:
    """The tensors in the dtype torch's type promotion gives them (models/promote.py): each
    float operand through `cast` (its gradient comes back in its own dtype), integer and
    bool ones converted (they take no gradient). True division of integers is float32."""
    first = tensors[0].dtype
    if all(t.dtype == first for t in tensors[1:]) and K.dtype_name(first) in FLOATS:
        return tensors  # the common case, at no cost
    dtype = result_type(*tensors)
    if op == "div" and category(dtype) < 2:
        dtype = np.dtype(np.float32)
    _floating(op, dtype)
    return tuple(_promote(t, dtype) for t in tensors)


def _promote(t: Tensor, dtype) -> Tensor:
    if t.dtype == dtype:
        return t
    if category(t.dtype) == 2:
        return cast(t, dtype)
    return Tensor(K.convert(t.data, dtype))


def _scalar_operand(op: str, x: Tensor, s) -> Tensor:
    """x ready for an affine map by the Python number s: torch makes an integer or bool
    tensor float32 (its default dtype) for a float s; integer arithmetic is refused."""
    if K.dtype_name(x.dtype) in FLOATS:
        return x
    if category(x.dtype) >= 0 and isinstance(s, (float, np.floating)):
        return _promote(x, np.dtype(np.float32))
    raise model_error(f"{op}: expected a float32, float64, bfloat16 or float16 tensor; got "
                      f"{x.dtype} (integer arithmetic is not computed by tilepy.models)",
                      hint="convert it: x.float()")


def _scalar(x) -> bool:
    return isinstance(x, (int, float, np.floating, np.integer))


def cast_hint(dtype) -> str:
    """How to convert a numpy input to `dtype` (bfloat16 is ml_dtypes')."""
    name = np.dtype(dtype).name
    return f"x.astype(ml_dtypes.{name})" if name == "bfloat16" else f"x.astype(np.{name})"


def is_narrow(x) -> bool:
    return isinstance(x, Tensor) and K.dtype_name(x.dtype) in NARROW


def cast(x: Tensor, dtype) -> Tensor:
    """x in another float dtype (the `convert` kernel: widening exact, narrowing rounded to
    nearest even); the gradient is cast back to x's dtype."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype.name not in FLOATS or x.dtype.name not in FLOATS:
        raise model_error(f"cast: converts between {', '.join(FLOATS)}; got {x.dtype} to "
                          f"{dtype}")
    return record(K.convert(x.data, dtype), (x,), lambda g: (K.convert(g, x.dtype),), "cast")


def in_float32(fn, *args, **kwargs):
    """fn(*args, **kwargs) with every bfloat16/float16 Tensor argument widened to float32
    and a Tensor result rounded back to that dtype: the ops that autocast keeps in float32
    (norms, softmax, losses, convolutions, pooling, recurrences). Without narrow arguments
    it is fn itself."""
    narrow = [a for a in (*args, *kwargs.values()) if is_narrow(a)]
    if not narrow:
        return fn(*args, **kwargs)
    wide = [cast(a, np.float32) if is_narrow(a) else a for a in args]
    kw = {k: cast(v, np.float32) if is_narrow(v) else v for k, v in kwargs.items()}
    out = fn(*wide, **kw)
    return cast(out, narrow[0].dtype) if isinstance(out, Tensor) else out


# ------------------------------------------------------------------ elementwise


def affine(x: Tensor, a: float, b: float) -> Tensor:
    """a * x + b for Python scalars a, b."""
    if K.dtype_name(x.dtype) not in FLOATS:
        _scalar_operand("a * x + b", x, 0)  # raises: integer arithmetic
    out = K.unary(x.data, "affine", a, b)
    return record(out, (x,), lambda g: (K.unary(g, "affine", a, 0.0),), "affine")


def _binary(op: str, x, y) -> Tensor:
    x, y = as_tensor(x), as_tensor(y)
    if x.dtype != y.dtype or K.dtype_name(x.dtype) not in FLOATS:
        x, y = promoted(op, x, y)
    if x.shape != y.shape:
        try:
            K.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            raise model_error(f"{op}: shapes {x.shape} and {y.shape} do not broadcast") from None
    out = K.binary(x.data, y.data, op)
    return record(out, (x, y), _BACKWARD[op](x, y, out), op)


def _add_bwd(x, y, out):
    return lambda g: (K.unbroadcast(g, x.shape), K.unbroadcast(g, y.shape))


def _sub_bwd(x, y, out):
    return lambda g: (K.unbroadcast(g, x.shape),
                      K.unbroadcast(K.unary(g, "affine", -1.0, 0.0), y.shape))


def _mul_bwd(x, y, out):
    return lambda g: (K.unbroadcast(K.binary(g, y.data, "mul"), x.shape),
                      K.unbroadcast(K.binary(g, x.data, "mul"), y.shape))


def _div_bwd(x, y, out):
    def bwd(g):  # d(x/y)/dy = -(x/y)/y
        gy = K.binary(K.binary(g, out, "mul"), y.data, "div")
        return (K.unbroadcast(K.binary(g, y.data, "div"), x.shape),
                K.unbroadcast(K.unary(gy, "affine", -1.0, 0.0), y.shape))
    return bwd


_BACKWARD = {"add": _add_bwd, "sub": _sub_bwd, "mul": _mul_bwd, "div": _div_bwd}


def add(x: Tensor, y) -> Tensor:
    if _scalar(y):
        return affine(_scalar_operand("add", x, y), 1.0, float(y))
    return _binary("add", x, y)


def sub(x: Tensor, y) -> Tensor:
    if _scalar(y):
        return affine(_scalar_operand("sub", x, y), 1.0, -float(y))
    return _binary("sub", x, y)


def rsub(x: Tensor, y) -> Tensor:
    if _scalar(y):
        return affine(_scalar_operand("sub", x, y), -1.0, float(y))
    return _binary("sub", y, x)


def mul(x: Tensor, y) -> Tensor:
    if _scalar(y):
        return affine(_scalar_operand("mul", x, y), float(y), 0.0)
    return _binary("mul", x, y)


def _true_division(x: Tensor, y) -> Tensor:
    """x made float32 for a division by the Python number y when it is an integer or bool
    tensor (torch's true division gives its default float)."""
    if _scalar(y) and category(x.dtype) in (0, 1):
        return _promote(x, np.dtype(np.float32))
    return x


def neg(x: Tensor) -> Tensor:
    return affine(_scalar_operand("neg", x, 0), -1.0, 0.0)


def div(x, y) -> Tensor:
    x = _true_division(as_tensor(x), y)
    return _binary("div", x, as_tensor(y, like=x))


def rdiv(x: Tensor, y) -> Tensor:
    """y / x for a Python number or array y."""
    x = _true_division(x, y)
    return _binary("div", as_tensor(y, like=x), x)


def activation(x: Tensor, op: str) -> Tensor:
    """relu, gelu, silu, tanh, sigmoid, exp, log: one kernel forward, one backward."""
    if K.dtype_name(x.dtype) not in FLOATS:
        raise model_error(f"{op}: expected a float32, float64, bfloat16 or float16 tensor; "
                          f"got {x.dtype}")
    if op == "relu":  # relu is the binary kernel's mask both ways: one compile fewer
        out = K.binary(x.data, x.data, "relu_mask")
        return record(out, (x,), lambda g: (K.binary(g, x.data, "relu_mask"),), op)
    if op == "gelu":  # the forward keeps the CDF: the backward computes no erf
        out, cdf = K.gelu(x.data)
        return record(out, (x,), lambda g: (K.gelu_bwd(x.data, cdf, g),), op)
    out = K.unary(x.data, op)
    return record(out, (x,), lambda g: (K.unary_bwd(x.data, out, g, op),), op)


# ------------------------------------------------------------------ matmul


def matmul(x: Tensor, w) -> Tensor:
    """(..., K) @ (K, N): the library gemm; backward dX = dY @ W^T, dW = X^T @ dY."""
    w = as_tensor(w)
    _same_dtype("matmul", x, w)
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[0]:
        raise model_error(f"matmul: shapes {x.shape} and {w.shape} do not multiply",
                          hint="expected (..., K) @ (K, N)")
    lead = x.shape[:-1]
    x2 = x.data.reshape(-1, x.shape[-1])
    out = K.matmul(x2, w.data).reshape(*lead, w.shape[1])

    def bwd(g):
        g2 = g.reshape(-1, w.shape[1])
        gx = K.matmul(g2, w.data.T).reshape(x.shape) if x.requires_grad else None
        gw = K.matmul(x2.T, g2) if w.requires_grad else None
        return gx, gw
    return record(out, (x, w), bwd, "matmul")


# ------------------------------------------------------------------ reductions


def _axes(x: Tensor, dim) -> tuple:
    if dim is None:
        return tuple(range(x.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -x.ndim <= d < max(x.ndim, 1):
            raise model_error(f"dimension {d} is out of range for a tensor of shape {x.shape}")
        out.append(d % max(x.ndim, 1))
    return tuple(sorted(set(out)))


def sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    axes = _axes(x, dim)
    out = K.reduce(x.data, axes, "sum", keepdim)
    kept = [1 if i in axes else n for i, n in enumerate(x.shape)]
    return record(out, (x,), lambda g: (K.broadcast(g.reshape(kept), x.shape),), "sum")


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    axes = _axes(x, dim)
    count = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    return affine(sum(x, dim, keepdim), 1.0 / count, 0.0)


def amax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The max over `dim`; its gradient is shared equally by the elements that attain it."""
    from tilepy.models.kernels.reduce import max_bwd

    if is_narrow(x):  # tie counts need float32
        return in_float32(amax, x, dim, keepdim)
    axes = _axes(x, dim)
    moved = K._move_last(x.data, axes)
    m = K.row_reduce2d(moved, "max")
    kept = [1 if i in axes else n for i, n in enumerate(x.shape)]
    out = m.reshape(kept if keepdim else [n for i, n in enumerate(x.shape) if i not in axes])

    def bwd(g):
        keep = [i for i in range(x.ndim) if i not in axes]
        gm = max_bwd(moved, m, contiguous(g).reshape(-1))
        perm = keep + list(axes)
        return (contiguous(np.transpose(
            gm.reshape([x.shape[i] for i in perm]), np.argsort(perm))),)
    return record(out, (x,), bwd, "max")


# ------------------------------------------------------------------ shape ops


def reshape(x: Tensor, shape) -> Tensor:
    try:
        out = x.data.reshape(shape)
    except ValueError:
        raise model_error(f"cannot reshape a tensor of shape {x.shape} "
                          f"({x.size} elements) to {tuple(shape)}") from None
    return record(out, (x,), lambda g: (g.reshape(x.shape),), "reshape")


def permute(x: Tensor, axes) -> Tensor:
    axes = tuple(int(a) % max(x.ndim, 1) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise model_error(f"permute: {axes} is not a permutation of the {x.ndim} "
                          f"dimensions of shape {x.shape}")
    out = contiguous(np.transpose(x.data, axes))
    inv = tuple(np.argsort(axes))
    return record(out, (x,), lambda g: (contiguous(np.transpose(g, inv)),),
                  "permute")


def _basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (int, np.integer, slice)) or i is None or i is Ellipsis
               for i in items)


def getitem(x: Tensor, index) -> Tensor:
    """Basic indexing (ints, slices, None, ...): a view forward, a scatter backward."""
    if isinstance(index, Tensor):
        index = index.data
    if not _basic(index):
        raise model_error("indexing a Tensor takes ints, slices, None and ... only",
                          hint="use nn.functional.embedding for gathers by an index array")
    out = contiguous(x.data[index])

    def bwd(g):
        gx = np.zeros(x.shape, x.dtype)  # the rest stays zero (never written)
        copy_into(gx[index], g)  # distinct elements: a move, no arithmetic
        return (gx,)
    return record(out, (x,), bwd, "getitem")


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate along `dim` (torch.cat)."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise model_error("cat: expected at least one tensor")
    ts = list(promoted("cat", *ts))
    try:
        out = np.concatenate([t.data for t in ts], axis=dim)
    except ValueError as e:
        raise model_error(f"cat: shapes {[t.shape for t in ts]} do not join along "
                          f"dimension {dim} ({e})") from None
    if hooks.ACTIVE:  # a captured step: the same copies, recorded for replay
        at = [slice(None)] * out.ndim
        for t, hi in zip(ts, np.cumsum([t.shape[dim] for t in ts])):
            at[dim] = slice(hi - t.shape[dim], hi)
            copy_into(out[tuple(at)], t.data)
    cuts = np.cumsum([t.shape[dim] for t in ts])[:-1]

    def bwd(g):
        return tuple(contiguous(p) for p in np.split(g, cuts, axis=dim))
    return record(out, tuple(ts), bwd, "cat")
