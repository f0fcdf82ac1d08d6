"""The fast mode's BLAS: `C = op(A) @ op(B) + beta * C` on strided 2-d views (`_gemm_acc` in
generated code) and the thread count of the BLAS library behind it (`one_thread`). The
numba tier calls Numba's own `numba_xxgemm` (scipy's BLAS, what its np.dot links to), so
kernels stay cacheable; the py tier uses numpy. Only jit/fast.py emits calls to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from functools import lru_cache
from pathlib import Path


def py_gemm_acc(a, b, c, ta, tb, beta):
    """The py tier's form: numpy's matmul of the same views."""
    x = a.T if ta else a
    y = b.T if tb else b
    if beta == 0:
        c[...] = 0
    if c.shape[0] and c.shape[1] and x.shape[1]:
        c += x @ y


def load_blas() -> None:
    """Import the module whose BLAS `numba_xxgemm` calls (scipy's), if it is there. Its
    idle threads are to sleep at once instead of spinning about 0.1 s after each call,
    where they would take a CPU from the Numba launch that follows: OPENBLAS_THREAD_TIMEOUT,
    read when the library loads (a value the user set is kept)."""
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    try:
        import scipy.linalg.cython_blas  # noqa: F401
    except ImportError:
        pass


@lru_cache(maxsize=None)
def numba_gemm_acc():
    """The numba tier's form (built lazily: importing this module imports no numba)."""
    import numba
    load_blas()  # numba_xxgemm finds sgemm/dgemm there
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def _xxgemm(typingctx, tx, ty, m, n, k, x, ldx, y, ldy, c, ldc, beta):
        """numba_xxgemm(kind, tx, ty, m, n, k, &1, x, ldx, y, ldy, &beta, c, ldc): the
        column-major C (m x n) = op(X) op(Y) + beta C; returns BLAS's status (0: done)."""
        dt = c.dtype
        sig = types.int32(tx, ty, m, n, k, x, ldx, y, ldy, c, ldc, beta)

        def codegen(context, builder, sig, args):
            vp, ch = cgutils.voidptr_t, ir.IntType(8)
            intp = context.get_value_type(types.intp)
            fnty = ir.FunctionType(ir.IntType(32), [ch, ch, ch, intp, intp, intp, vp, vp,
                                                    intp, vp, intp, vp, vp, intp])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")

            def arg(i, to=types.intp):
                return context.cast(builder, args[i], sig.args[i], to)

            def data(i):
                arr = context.make_array(sig.args[i])(context, builder, args[i])
                return builder.bitcast(arr.data, vp)

            def flag(i):  # nonzero: 't' (transpose), else 'n'
                v = arg(i)
                return builder.select(builder.icmp_unsigned("!=", v, intp(0)),
                                      ch(ord("t")), ch(ord("n")))

            one = cgutils.alloca_once_value(builder, context.get_constant(dt, 1.0))
            bet = cgutils.alloca_once_value(builder, arg(11, dt))
            kind = ch(ord("s" if dt == types.float32 else "d"))
            return builder.call(fn, (
                kind, flag(0), flag(1), arg(2), arg(3), arg(4), builder.bitcast(one, vp),
                data(5), arg(6), data(7), arg(8), builder.bitcast(bet, vp), data(9),
                arg(10)))

        return sig, codegen

    @numba.njit
    def gemm_acc(a, b, c, ta, tb, beta):
        """Row-major C (m x n) = op(A) @ op(B) + beta C is column-major C^T = op(B)^T
        op(A)^T + beta C^T: BLAS takes B's memory first, each view's row stride as its
        leading dimension."""
        m, n = c.shape
        k = a.shape[0] if ta else a.shape[1]
        if m == 0 or n == 0:
            return
        if k == 0:
            if beta == 0:
                c[:, :] = 0
            return
        isz = c.itemsize
        _xxgemm(1 if tb else 0, 1 if ta else 0, n, m, k, b, b.strides[0] // isz, a,
                a.strides[0] // isz, c, c.strides[0] // isz, beta)

    return gemm_acc


PANEL = 16  # panels of gemm_par are whole multiples of this many rows (or columns)


def py_gemm_par(a, b, c, ta, tb, beta):
    """The py tier's gemm_par: one product (numpy runs it on its own threads)."""
    py_gemm_acc(a, b, c, ta, tb, beta)


@lru_cache(maxsize=None)
def numba_gemm_par():
    """`C = op(A) @ op(B) + beta C` over Numba's threads: C's longer side cut into one panel
    per thread, each one single-threaded BLAS call (the caller keeps BLAS at one thread).
    Each element of C is the same BLAS sum over K whichever panel holds it, so the panels
    change which thread computes a value, not the values BLAS's kernels would give one call
    of that panel's shape."""
    import numba
    from llvmlite import ir
    from numba import prange
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    gemm_acc = numba_gemm_acc()
    numba.get_num_threads()  # starts the threading layer, which names the symbol below

    @intrinsic
    def threads(typingctx):
        """The calling thread's Numba thread count, by the symbol Numba's own parallel
        loops call (numba.get_num_threads() in njit code embeds an address, which makes a
        kernel uncacheable)."""
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(cgutils.intp_t, [])
            return builder.call(
                cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads"), [])
        return types.intp(), codegen

    @numba.njit(parallel=True)
    def gemm_par(a, b, c, ta, tb, beta):
        m, n = c.shape
        ext = max(m, n)
        t = threads()
        per = (ext + t - 1) // t  # a thread's share of C's longer side ...
        step = (per + PANEL - 1) // PANEL * PANEL  # ... up to a multiple of PANEL
        if step >= ext:
            gemm_acc(a, b, c, ta, tb, beta)
            return
        for p in prange(-(-ext // step)):
            lo = p * step
            hi = min(ext, lo + step)
            if m >= n:
                gemm_acc(a[:, lo:hi] if ta else a[lo:hi, :], b, c[lo:hi, :], ta, tb, beta)
            else:
                gemm_acc(a, b[lo:hi, :] if tb else b[:, lo:hi], c[:, lo:hi], ta, tb, beta)

    return gemm_par


# ------------------------------------------------------------------ BLAS threads


@lru_cache(maxsize=None)
def _openblas():
    """(get, set) of the thread count of scipy's OpenBLAS (what numba_xxgemm calls), or
    None when that BLAS is not a wheel's OpenBLAS (then nothing is changed)."""
    try:
        import scipy
        load_blas()
    except ImportError:
        return None
    for lib in sorted((Path(scipy.__file__).parent.parent / "scipy.libs").glob("*openblas*")):
        try:
            dll = ctypes.CDLL(str(lib))
        except OSError:
            continue
        for pre, suf in (("scipy_openblas_", ""), ("openblas_", ""), ("scipy_openblas_", "64_")):
            get = getattr(dll, f"{pre}get_num_threads{suf}", None)
            put = getattr(dll, f"{pre}set_num_threads{suf}", None)
            if get is not None and put is not None:
                put.argtypes = [ctypes.c_int]
                return get, put
    return None


def _to_threads(n: int = 1):
    """Set BLAS to `n` threads; the count before (to restore), or None if nothing changed."""
    h = _openblas()
    if h is None:
        return None
    before = h[0]()
    if before == n:
        return None
    h[1](n)
    return before


def _restore(before) -> None:
    if before is not None:
        _openblas()[1](before)


@contextlib.contextmanager
def one_thread():
    """BLAS calls inside a kernel's parallel block loop run single-threaded: each block
    is already on its own CPU, and two blocks each starting BLAS's pool of threads
    oversubscribe the machine (docs/perf-log.md). The count is restored after."""
    before = _to_threads(1)
    try:
        yield
    finally:
        _restore(before)


def call_one_thread(fn, *args):
    """fn(*args) inside one_thread(), without a context manager's cost per call (the
    models launch a fast kernel that calls BLAS this way, several times a step)."""
    before = _to_threads(1)
    try:
        return fn(*args)
    finally:
        _restore(before)
