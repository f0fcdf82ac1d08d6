"""TileLang names that are other spellings of what tilepy has (`T.clamp`, `T.Cast`,
`T.alloc_buffer`), and the GPU-only features that have no CPU meaning, each refused with one
clear NotPortableError at the user's line. Emits IR only through builtins' handlers.
"""

from __future__ import annotations

from tilepy.errors import Loc, NotPortableError, TileSyntaxError, TileTypeError
from tilepy.frontend import builtins, exprs, gridsync
from tilepy.frontend.builtins import _ALLOC, Args, _alloc, _cast
from tilepy.frontend.im2col import im2col
from tilepy.frontend.macro import inline_macro
from tilepy.frontend.surface import TensorSpec
from tilepy.frontend.values import DataRef, PointeeView, StartPoint, describe
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Load, Region
from tilepy.ir.ops import Op
from tilepy.ir.types import Scope, int32

# feature names as TileLang spells them -> what they are (for the message)
NOT_PORTABLE = {
    "create_tma_descriptor": "TMA descriptors", "tma_load": "TMA copies",
    "tma_store": "TMA copies", "tma_copy": "TMA copies", "tma_store_arrive": "TMA copies",
    "tma_store_wait": "TMA copies", "fence_proxy_async": "TMA proxy fences",
    "alloc_barrier": "mbarriers", "create_list_of_mbarrier": "mbarriers",
    "get_mbarrier": "mbarriers", "mbarrier_wait_parity": "mbarriers",
    "mbarrier_arrive": "mbarriers", "mbarrier_expect_tx": "mbarriers",
    "barrier_wait": "mbarriers", "barrier_arrive": "mbarriers",
    "ws": "warp specialisation", "set_max_nreg_ws": "warp specialisation",
    "warpgroup_arrive": "warpgroup MMA", "warpgroup_commit_batch": "warpgroup MMA",
    "warpgroup_wait": "warpgroup MMA", "wgmma_gemm": "warpgroup MMA",
    "tcgen05_gemm": "tcgen05 (Blackwell tensor memory)", "alloc_tmem": "tcgen05 (Blackwell "
    "tensor memory)", "tcgen05_ld": "tcgen05 (Blackwell tensor memory)",
}

_SCOPES = {"shared": "alloc_shared", "shared.dyn": "alloc_shared",
           "local.fragment": "alloc_fragment", "local": "alloc_local"}


def _not_portable(tr, node, loc: Loc, name: str):
    raise NotPortableError(
        f"not portable to the CPU reference: {NOT_PORTABLE[name]} (T.{name})", loc,
        hint="this GPU feature has no CPU meaning; write the kernel with T.copy, T.gemm "
             "and T.Parallel (the portable form TileLang also accepts)")


def _clamp(tr, node, loc: Loc, name: str):
    a = Args(tr, node, ["x", "lo", "hi"], loc, "T.clamp")
    x, lo, hi = a.value("x"), a.value("lo"), a.value("hi")
    if not any(exprs.is_ir(v) for v in (x, lo, hi)):
        return max(min(x, hi), lo)
    return exprs.call(Op.MAX, [exprs.call(Op.MIN, [x, hi], loc), lo], loc)


def _cast_tvm(tr, node, loc: Loc, name: str):
    """`T.Cast(dtype, x)`: TVM's order of T.cast's arguments."""
    return _cast(tr, node, loc, "cast")


def _scratch(tr, node, loc: Loc, name: str):
    """`T.alloc_buffer(shape, dtype)` / `T.alloc_global` outside T.Kernel: a global scratch
    buffer (e.g. split-K partial sums) that every call allocates, zeroed, and that the
    kernel's launches share; the caller neither passes nor gets it."""
    a = Args(tr, node, ["shape", "dtype", "scope"], loc, f"T.{name}")
    scope = a.const("scope", "global")
    if str(scope) != "global":
        raise TileTypeError(f"T.{name} outside T.Kernel: expected a global buffer; got scope "
                            f"{scope!r}", loc, hint="allocate shared and fragment buffers "
                                                    "inside the `with T.Kernel(...)` block")
    shape = builtins._shape(tr, a.value("shape"), loc)
    dt = builtins._dtype_arg(a.value("dtype", "float32"), loc)
    buf = Buffer(tr.fresh_name(), shape, dt, Scope.GLOBAL)
    tr.params.append(buf)
    tr.__dict__.setdefault("scratch", []).append(buf)
    return buf


def _make_tensor(tr, node, loc: Loc, name: str):
    """`T.make_tensor(P[i], shape, dtype)`, P a table of addresses (`T.Tensor([n], T.ptr)`):
    a view of one stacked global buffer (P's length x shape) that each call fills from the
    tensors the addresses point at, so the kernel runs on ordinary global memory."""
    a = Args(tr, node, ["ptr", "shape", "dtype"], loc, "T.make_tensor")
    ptr = a.value("ptr")
    table = ptr.buffer if isinstance(ptr, Load) else None
    if (table is None or table not in tr.params or table.ndim != 1
            or table.dtype.name not in ("int64", "uint64")):
        raise TileTypeError(f"T.make_tensor: expected an element of a kernel argument that "
                            f"holds addresses (T.Tensor([n], T.ptr)); got {describe(ptr)}",
                            loc, hint="pass a table of tensor.data_ptr() values as T.ptr")
    shape = builtins._shape(tr, a.value("shape"), loc)
    if not all(isinstance(s, Const) for s in shape):
        raise TileTypeError("T.make_tensor needs a shape known when the kernel is built", loc)
    dt = builtins._dtype_arg(a.value("dtype", "float32"), loc)
    views = tr.__dict__.setdefault("pointees", {})
    key = (table.name, tuple(int(s.value) for s in shape), dt.name)
    if key not in views:
        buf = Buffer(tr.unique(f"{table.name}_{dt.name}"), (table.shape[0],) + shape, dt,
                     Scope.GLOBAL)
        tr.params.append(buf)
        tr.__dict__.setdefault("scratch", []).append(buf)
        views[key] = (buf, table)
    return PointeeView(views[key][0], ptr.indices[0])


def _alloc_buffer(tr, node, loc: Loc, name: str):
    if not tr.in_kernel:
        return _scratch(tr, node, loc, name)
    a = Args(tr, node, ["shape", "dtype", "scope"], loc, "T.alloc_buffer")
    scope = a.const("scope", "shared")
    kind = _SCOPES.get(str(scope))
    if kind is None:
        raise TileTypeError(f"T.alloc_buffer: expected scope one of {', '.join(_SCOPES)}; "
                            f"got {scope!r}", loc,
                            hint="global buffers are kernel arguments (T.Tensor)")
    node.keywords = [k for k in node.keywords if k.arg != "scope"]
    node.args = node.args[:2]
    assert kind in _ALLOC
    return _alloc(tr, node, loc, kind)


def _block_binding(tr, node, loc: Loc, name: str):
    """`T.get_block_binding(i)`: the launch's block index i (blockIdx.x, y, z)."""
    dim = Args(tr, node, ["dim"], loc, "T.get_block_binding").const("dim", 0)
    bvars = getattr(tr, "block_vars", ()) if tr.in_kernel else ()
    if not isinstance(dim, int) or not 0 <= dim < len(bvars):
        raise TileTypeError(f"T.get_block_binding: expected a grid dimension 0..."
                            f"{len(bvars) - 1} inside T.Kernel; got {dim!r}", loc)
    return bvars[dim]


HANDLERS = {"get_block_binding": _block_binding, "clamp": _clamp, "Cast": _cast_tvm,
            "alloc_buffer": _alloc_buffer, "make_tensor": _make_tensor}
HANDLERS["sync_grid"] = gridsync.sync_grid
HANDLERS.update({n: _not_portable for n in NOT_PORTABLE})
builtins.HANDLERS.update(HANDLERS)


def _tir_const(tr, node, loc: Loc, name: str):
    """`tvm.tir.const(value, dtype)`: a literal of that dtype."""
    a = Args(tr, node, ["value", "dtype"], loc, "tir.const")
    value = a.const("value")
    dt = builtins._dtype_arg(a.value("dtype", "int32" if isinstance(value, int) else
                                     "float32"), loc)
    return exprs.make_const(value, dt, loc)


def _atomic_add_n(tr, node, loc: Loc, name: str):
    """`T.atomic_addx2(C[m, n], S[i, j])` (x4 too): atomic adds of that many consecutive
    elements along the last dimension, in order."""
    a = Args(tr, node, ["dst", "value"], loc, f"T.{name}")
    dst, val = a.operand("dst"), a.operand("value")
    if not isinstance(dst, StartPoint) or not isinstance(val, StartPoint):
        raise TileTypeError(f"T.{name} expects two elements (`C[m, n]`, `S[i, j]`); got "
                            f"{describe(dst)} and {describe(val)}", loc)
    one = tuple(Const(1, int32) for _ in dst.buffer.shape)
    for t in range(int(name[-1])):
        def at(p, t=t):
            return p.starts[:-1] + (exprs.call(Op.ADD, [p.starts[-1], t], loc),)
        tr.emit(S.AtomicAdd(Region(dst.buffer, at(dst), one),
                            Load(val.buffer, at(val)), loc=loc))


def _reshape(tr, node, loc: Loc, name: str):
    """`T.reshape(buf, shape)` / `T.view(buf, shape)`: a row-major re-view of buf's storage,
    as `T.Tensor(shape, buf.dtype, buf.data)`; assign it to a name."""
    a = Args(tr, node, ["buffer", "shape", "dtype"], loc, f"T.{name}")
    buf = a.value("buffer")
    if isinstance(buf, Region):
        buf = buf.buffer
    if not isinstance(buf, Buffer):
        raise TileTypeError(f"T.{name} expects a buffer; got {describe(buf)}", loc)
    dt = a.value("dtype", buf.dtype)
    if builtins._dtype_arg(dt, loc) != buf.dtype:
        raise TileTypeError(f"T.{name} keeps the dtype of {buf.name} ({buf.dtype}); got {dt}",
                            loc, hint="reinterpreting bits across dtypes is not supported")
    shape = a.value("shape")
    return TensorSpec(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,),
                      buf.dtype, DataRef(buf))


def _alloc_global(tr, node, loc: Loc, name: str):
    if not tr.in_kernel:
        return _scratch(tr, node, loc, name)
    raise TileSyntaxError("T.alloc_global inside T.Kernel: expected it before the launch "
                          "(a global buffer is shared by all blocks)", loc,
                          hint="move it above `with T.Kernel(...)`")


def _im2col(tr, node, loc: Loc, name: str):
    names = ["img", "col", "nhw_step", "c_step", "kernel", "stride", "dilation", "pad"]
    a = Args(tr, node, names + ["eviction_policy"], loc, f"T.{name}")
    args = [a.value(n) if n in ("nhw_step", "c_step") else a.operand(n) if n in (
        "img", "col") else a.const(n) for n in names]
    args[:2] = [v.buffer if isinstance(v, Region) else v for v in args[:2]]
    return inline_macro(tr, im2col, args, {}, loc)


builtins.HANDLERS["tir_const"] = _tir_const
builtins.HANDLERS["gemm_v1"] = builtins.HANDLERS["gemm_v2"] = builtins.HANDLERS["gemm"]
builtins.HANDLERS["im2col"] = builtins.HANDLERS["c2d_im2col"] = _im2col
builtins.HANDLERS["reshape"] = builtins.HANDLERS["view"] = _reshape
builtins.HANDLERS["alloc_global"] = _alloc_global
builtins.HANDLERS["atomic_addx2"] = builtins.HANDLERS["atomic_addx4"] = _atomic_add_n

from tilepy.frontend import simt  # noqa: E402, F401 - thread-level handlers join the table
