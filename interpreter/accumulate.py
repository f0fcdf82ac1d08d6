"""The accumulating tile ops, T.gemm, T.reduce_* and T.cumsum, in the contract's order (rule
4): k ascending from the accumulator, reductions ascending along the axis, one rounding per
op in the accumulator's dtype, each step the op table's ADD / MUL / MAX / MIN / ABS. The
vectorised forms for float32/float64 (a large gemm shares its block groups with one worker
thread) give exactly the sequential results.
"""

from __future__ import annotations

import itertools
import os

import numpy as np

from tilepy.interpreter import access, regions, sanitize
from tilepy.interpreter.state import Ctx
from tilepy.interpreter.targets import Key
from tilepy.interpreter.tileops import convert
from tilepy.interpreter.trace import GemmEvent
from tilepy.ir.errors import TileTypeError
from tilepy.ir.ops import OPS, Op, reference
from tilepy.ir.stmt import Cumsum, Gemm, Reduce, ReduceKind
from tilepy.ir.tileops import reduce_identity
from tilepy.ir.types import DType, compute_dtype

_PLAIN = (np.dtype(np.float32), np.dtype(np.float64))
_PRODUCT_BYTES = 1 << 20  # gemm products computed per numpy call: 1 MiB (L2)


def _plain(dt: DType) -> bool:
    """float32/float64: numpy's own op is the table's op, rounded once, no extra step."""
    return dt.np_dtype in _PLAIN


def _values(ctx: Ctx, t: regions.Tile, src: DType, dst: DType) -> np.ndarray:
    """A tile's values converted to `dst` (compute dtype)."""
    return access.to_compute(convert(regions.read(ctx, t), src, dst), dst)


# ---------------------------------------------------------------- gemm


def _matrix(ctx: Ctx, t: regions.Tile, what: str) -> tuple[int, int]:
    ext = [e for e in t.ext]
    while len(ext) > 2 and 1 in ext:
        ext.remove(1)
    if len(ext) != 2:
        raise TileTypeError(f"T.gemm needs 2-d tiles: expected {what} ({t.buf.name}) to be "
                            f"a matrix; got a tile of shape {t.ext}", loc=ctx.loc)
    return ext[0], ext[1]


def gemm(ctx: Ctx, s: Gemm, sel, mask) -> None:
    ta, tb, tc = (regions.resolve(ctx, r, sel, "gemm") for r in (s.a, s.b, s.c))
    (ar, ac), (br, bc), (m, n) = (_matrix(ctx, t, w) for t, w in ((ta, "A"), (tb, "B"),
                                                                  (tc, "C")))
    (am, k), (bk, bn) = ((ac, ar) if s.transpose_a else (ar, ac)), \
        ((bc, br) if s.transpose_b else (br, bc))
    if (am, bn, bk) != (m, n, k):
        raise TileTypeError(
            f"T.gemm shapes do not fit: expected A ({m}, K), B (K, {n}) for C ({m}, {n}); "
            f"got A {(am, k)}, B {(bk, bn)} after transposes", loc=ctx.loc)
    cdt = s.c.buffer.dtype
    a = _values(ctx, ta, s.a.buffer.dtype, cdt).reshape(ta.n, ar, ac)
    b = _values(ctx, tb, s.b.buffer.dtype, cdt).reshape(tb.n, br, bc)
    at = a if s.transpose_a else a.transpose(0, 2, 1)  # (n, K, M)
    bt = b.transpose(0, 2, 1) if s.transpose_b else b  # (n, K, N)
    # k-major copies: a group's blocks and k steps then merge into one axis of the
    # products, and einsum runs its fast loop for 3-d iterations
    at, bt = np.ascontiguousarray(at), np.ascontiguousarray(bt)
    acc = _in_place(ctx, s, tc, cdt, m, n)
    if acc is not None:
        _gemm_steps(at, bt, acc, cdt)
    else:
        acc = _accumulator(ctx, s, tc, cdt, m, n)
        _gemm_steps(at, bt, acc, cdt)
        regions.write(ctx, tc, access.to_storage(acc, cdt, cdt).reshape((tc.n,) + tc.ext))
    _trace_gemm(ctx, s, tc, m, n, k)


def _in_place(ctx: Ctx, s: Gemm, tc: regions.Tile, cdt: DType, m: int, n: int):
    """C's own storage as the accumulator, when C is a whole float32/float64 block-local
    buffer of every block in the batch (the common fragment case), else None."""
    arr = ctx.storage(tc.buf)
    if (tc.is_global or not _plain(cdt) or tc.n != ctx.B or arr.shape[1:] != tc.ext
            or any(int(x) != 0 for x in tc.starts) or not arr.flags.c_contiguous):
        return None
    whole = Key((slice(None),))
    if s.clear_accum:
        arr[...] = 0
        sanitize.mark_written(ctx, tc.buf, whole)
    else:
        sanitize.check_init(ctx, tc.buf, whole, None)
    return arr.reshape(tc.n, m, n)


def _accumulator(ctx: Ctx, s: Gemm, tc: regions.Tile, cdt: DType, m: int, n: int):
    if s.clear_accum:
        return np.zeros((tc.n, m, n), dtype=compute_dtype(cdt))
    return np.array(_values(ctx, tc, cdt, cdt).reshape(tc.n, m, n))


def _gemm_steps(at: np.ndarray, bt: np.ndarray, acc: np.ndarray, cdt: DType) -> None:
    """acc[:, i, j] = acc + a[:, k, i] * b[:, k, j] for k ascending (in place)."""
    k = at.shape[1]
    if k == 0:
        return
    if not _plain(cdt):
        for kk in range(k):
            p = reference(Op.MUL, [at[:, kk, :, None], bt[:, kk, None, :]], (cdt, cdt), cdt)
            acc[...] = reference(Op.ADD, [acc, p], (cdt, cdt), cdt)
        return
    with np.errstate(all="ignore"):  # IEEE overflow / inf - inf are values, not errors
        if acc.shape[1] * acc.shape[2] == 1 or _has_minus_zero(acc):
            _signed_steps(at, bt, acc)  # 1x1: k would be the innermost axis of the reduce
        else:
            _product_steps(at, bt, acc)


def _has_minus_zero(x: np.ndarray) -> bool:
    """Whether x holds a -0: its bits, read as a signed integer, are the smallest one."""
    ints = x.view(np.int32 if x.dtype.itemsize == 4 else np.int64)
    return ints.size > 0 and int(ints.min()) == np.iinfo(ints.dtype).min


def _signed_steps(at: np.ndarray, bt: np.ndarray, c: np.ndarray) -> None:
    """c = c + a[k] (x) b[k] for k ascending, one op table MUL and ADD per step: the
    reference form, used when c holds a -0 or is 1x1 (see _product_steps)."""
    mul, add = OPS[Op.MUL].numpy, OPS[Op.ADD].numpy
    tmp = np.empty_like(c)
    a_, b_ = at[:, :, :, None], bt[:, :, None, :]
    for kk in range(at.shape[1]):
        mul(a_[:, kk], b_[:, kk], out=tmp)
        add(c, tmp, out=c)


def _product_steps(at: np.ndarray, bt: np.ndarray, c: np.ndarray) -> None:
    """The same sums as _signed_steps for an accumulator c that holds no -0, computed a
    group of blocks and k steps at a time (the group's products stay in L2):

        P[:, k] = a[k] (x) b[k]          the product rounded once (einsum: +0 + a*b)
        P[:, 0] = c + P[:, 0]            the table's ADD, the first step
        c = add.reduce(P, axis=1)        the next steps, k ascending

    numpy reduces an axis other than the innermost one by adding its slices in order
    (pairwise summation is only ever used along the innermost axis, which is N or M here,
    never k, as C is not 1x1), each add rounded once; it may start from the identity +0.
    Both einsum and that start can turn a -0 into +0, which changes no sum here: in
    round-to-nearest x + y is -0 only when both are -0, so an accumulator that holds no -0
    never comes to hold one, and +0 and -0 added to any other value give the same result.

    Big problems, when a CPU is idle, share their block groups between this thread and
    one worker thread (einsum's products and the reduce run without the GIL): each
    takes the next group when it is free. A group is computed whole by one of them, the
    same way, so the result does not depend on the threads.
    """
    nb, kk, m = at.shape
    n = c.shape[2]
    products = _PRODUCT_BYTES // c.itemsize
    ks = max(1, min(kk, products // (m * n)))  # k steps per product block
    g = max(1, products // (ks * m * n))  # blocks per product block
    groups = [(b0, min(nb, b0 + g)) for b0 in range(0, nb, g)]
    big = len(groups) >= 2 and nb * kk * m * n >= _THREAD_MIN
    pool = _pool() if big and _idle_core() else None
    take = itertools.count().__next__  # one atomic step under the GIL
    if pool is None:
        _product_groups(at, bt, c, groups, ks, take)
        return
    job = pool.submit(_product_groups, at, bt, c, groups, ks, take)
    try:
        _product_groups(at, bt, c, groups, ks, take)
    finally:
        job.result()


def _product_groups(at, bt, c, groups, ks: int, take) -> None:
    """_product_steps for the groups of blocks this thread takes."""
    _, kk, m = at.shape
    n = c.shape[2]
    buf = np.empty(max(b1 - b0 for b0, b1 in groups) * ks * m * n, c.dtype)
    add = OPS[Op.ADD].numpy
    with np.errstate(all="ignore"):  # per thread
        while (i := take()) < len(groups):
            b0, b1 = groups[i]
            cg = c[b0:b1]
            for k0 in range(0, kk, ks):
                k1 = min(kk, k0 + ks)
                p = buf[:(b1 - b0) * (k1 - k0) * m * n].reshape(b1 - b0, k1 - k0, m, n)
                np.einsum("bki,bkj->bkij", at[b0:b1, k0:k1], bt[b0:b1, k0:k1], out=p)
                add(cg, p[:, 0], out=p[:, 0])
                add.reduce(p, axis=1, out=cg)


_THREAD_MIN = 1 << 22  # products per T.gemm call below which one thread does them all
_POOL: dict = {}


def _idle_core() -> bool:
    """Whether a CPU looks idle now: Linux's count of runnable threads (/proc/loadavg,
    this one included) is below the CPU count. With every CPU busy the worker measured
    slower than none (GIL hand-offs, waits for a descheduled worker). True if unknown."""
    try:
        with open("/proc/loadavg") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return runnable < (os.cpu_count() or 1)


def _pool():
    """The one-worker pool, made on first use in each process (a forked child cannot use
    its parent's thread), or None when TILEPY_INTERP_THREADS=1 (or 0) or on one CPU."""
    if os.environ.get("TILEPY_INTERP_THREADS", "").strip() in ("0", "1"):
        return None
    pid = os.getpid()
    if pid not in _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.clear()
        many = (os.cpu_count() or 1) > 1
        _POOL[pid] = ThreadPoolExecutor(1, thread_name_prefix="tilepy-gemm") if many else None
    return _POOL[pid]


def _trace_gemm(ctx: Ctx, s: Gemm, tc: regions.Tile, m: int, n: int, k: int) -> None:
    lst = ctx.shared.listener
    if lst is None:
        return
    for p in tc.pos:
        lst.on_gemm(GemmEvent(ctx.block_coords(int(ctx.lin[p])), s.a.buffer.name,
                              s.b.buffer.name, s.c.buffer.name, m, n, k, 2 * m * n * k,
                              ctx.loc))


# ---------------------------------------------------------------- reductions


def reduce(ctx: Ctx, s: Reduce, sel, mask) -> None:
    ts = regions.resolve(ctx, s.src, sel, "reduce")
    td = regions.resolve(ctx, s.dst, sel, "reduce")
    dt = s.dst.buffer.dtype
    v = _values(ctx, ts, s.src.buffer.dtype, dt)
    if not 0 <= s.dim < len(ts.ext):
        raise TileTypeError(f"reduce dim out of range: expected 0 <= dim < {len(ts.ext)}; "
                            f"got {s.dim}", loc=ctx.loc)
    out_shape = tuple(e for d, e in enumerate(ts.ext) if d != s.dim)
    _check_dst(ctx, td, out_shape)
    if s.kind in (ReduceKind.ABSSUM, ReduceKind.ABSMAX):
        v = reference(Op.ABS, [v], (dt,), dt)
    v = np.moveaxis(v, s.dim + 1, -1)  # (n, ..., L): combine along the last axis
    if s.clear:
        init = np.broadcast_to(np.asarray(reduce_identity(s.kind, dt)).astype(v.dtype),
                               v.shape[:-1])
    else:
        init = _values(ctx, td, dt, dt).reshape(v.shape[:-1])
    stacked = np.concatenate([init[..., None], v], axis=-1)
    if s.kind in (ReduceKind.SUM, ReduceKind.ABSSUM):
        out = _running_sum(stacked, dt)[..., -1]
    else:
        out = _extreme(stacked, dt, Op.MIN if s.kind is ReduceKind.MIN else Op.MAX)
    regions.write(ctx, td, access.to_storage(out, dt, dt).reshape((td.n,) + td.ext))


def _check_dst(ctx: Ctx, td: regions.Tile, want: tuple[int, ...]) -> None:
    if int(np.prod(td.ext)) != int(np.prod(want)):
        raise TileTypeError(f"reduce destination {td.buf.name} has the wrong shape: expected "
                            f"{want}; got {td.ext}", loc=ctx.loc)


def _running_sum(x: np.ndarray, dt: DType) -> np.ndarray:
    """Prefix sums along the last axis, one table ADD per step, in order."""
    if _plain(dt) or dt.is_int and dt.bits >= 8:
        with np.errstate(all="ignore"):
            return OPS[Op.ADD].numpy.accumulate(x, axis=-1)  # sequential; ints wrap alike
    out = np.array(x)
    for j in range(1, x.shape[-1]):
        out[..., j] = reference(Op.ADD, [out[..., j - 1], x[..., j]], (dt, dt), dt)
    return out


def _extreme(x: np.ndarray, dt: DType, op: Op) -> np.ndarray:
    """The sequential fold of the table's MAX (or MIN) along the last axis: the first
    element equal to the extreme (the sign of a zero comes from it), or the first NaN."""
    if x.dtype.kind != "f":
        acc = x[..., 0]
        for j in range(1, x.shape[-1]):  # ints: the order cannot matter, but stay exact
            acc = reference(op, [acc, x[..., j]], (dt, dt), dt)
        return acc
    m = np.max(x, axis=-1) if op is Op.MAX else np.min(x, axis=-1)
    first = np.argmax(x == m[..., None], axis=-1)
    out = np.take_along_axis(x, first[..., None], axis=-1)[..., 0]
    nan = np.isnan(x)
    if nan.any():
        first_nan = np.argmax(nan, axis=-1)
        out = np.where(nan.any(axis=-1),
                       np.take_along_axis(x, first_nan[..., None], axis=-1)[..., 0], out)
    return out


# ---------------------------------------------------------------- cumsum


def cumsum(ctx: Ctx, s: Cumsum, sel, mask) -> None:
    ts = regions.resolve(ctx, s.src, sel, "cumsum")
    td = regions.resolve(ctx, s.dst, sel, "cumsum")
    dt = s.dst.buffer.dtype
    v = _values(ctx, ts, s.src.buffer.dtype, dt)
    if not 0 <= s.dim < len(ts.ext):
        raise TileTypeError(f"cumsum dim out of range: expected 0 <= dim < {len(ts.ext)}; "
                            f"got {s.dim}", loc=ctx.loc)
    _check_dst(ctx, td, ts.ext)
    v = np.moveaxis(v, s.dim + 1, -1)
    if s.reverse:
        v = v[..., ::-1]
    zero = np.zeros(v.shape[:-1] + (1,), v.dtype)
    out = _running_sum(np.concatenate([zero, v], axis=-1), dt)[..., 1:]
    if s.reverse:
        out = out[..., ::-1]
    out = np.moveaxis(out, -1, s.dim + 1)
    regions.write(ctx, td, access.to_storage(out, dt, dt).reshape((td.n,) + td.ext))

