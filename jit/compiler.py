"""Compiling lowered kernels and launching them: tiers, the in-memory cache, argument
marshalling, and Numba failures turned into LoweringError. The `numba` tier compiles the
generated module with njit(parallel=True) for an explicit signature (tile shapes are
constants, sizes int64 arguments); the `py` tier runs the same function as plain Python.
Semantics are lowering's business.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from tilepy.ir.errors import ArgumentError, LoweringError, TilepyError
from tilepy.ir.stmt import Breakpoint, PrimFunc, walk, written_params
from tilepy.jit import diskcache
from tilepy.jit.linkonce import linked_once
from tilepy.jit.lower import Lowered, lower
from tilepy.jit.notes import compiling
from tilepy.jit.runtime import numba_namespace, py_namespace
from tilepy.jit.scalars import storage_codec
from tilepy.precision.numba_target import configure, configure_target

TIERS = ("numba", "py")
_LOCK = threading.RLock()
_MEMORY: dict[tuple, "CompiledKernel"] = {}
_BY_ID: dict[tuple, tuple[PrimFunc, "CompiledKernel"]] = {}


@dataclass
class CompiledKernel:
    """A kernel compiled for one tier; call it with the arrays and sizes of `run`."""

    func: PrimFunc
    source: str  # the generated Python (kernel.source)
    tier: str
    fast: bool
    path: str  # the generated module's file
    fn: object = field(repr=False)
    arg_names: tuple[str, ...] = field(repr=False)
    views: tuple = field(repr=False)  # per param: storage dtype to view as, or None
    blas_in_blocks: bool = field(default=False, repr=False)  # fast: BLAS inside blocks

    def __call__(self, arrays: dict, sizes: dict) -> None:
        args = self._args(arrays, sizes)
        if self.tier == "py":
            with np.errstate(all="ignore"):
                self.fn(*args)
        elif self.blas_in_blocks:
            from tilepy.jit.blas import one_thread

            with one_thread():
                self.fn(*args)
        else:
            self.fn(*args)

    def _args(self, arrays: dict, sizes: dict) -> list:
        out = []
        for p, view in zip(self.func.params, self.views):
            a = arrays.get(p.name)
            if a is None:
                raise ArgumentError(f"no array was passed for the parameter '{p.name}'",
                                    loc=self.func.loc)
            if not a.flags.c_contiguous:
                raise ArgumentError(f"'{p.name}' must be C-contiguous",
                                    loc=self.func.loc, hint="pass np.ascontiguousarray(x)")
            out.append(a.view(view) if view is not None else a)
        for v in self.func.sizes:
            if v.name not in sizes:
                raise ArgumentError(f"no value was bound to the size '{v.name}'",
                                    loc=self.func.loc)
            out.append(int(sizes[v.name]))
        return out


def compile(func: PrimFunc, *, fast: bool = False, tier: str = "numba",
            disk: bool | None = None, fuse: bool | None = None,
            strict: bool = False) -> CompiledKernel:  # noqa: A001
    """The compiled kernel for `func`, from memory, the disk cache or a fresh build.
    `fuse`: row fusion of tile statements (jit/passes/fusion.py); by default in fast mode only.
    `strict`: out-of-range global element accesses raise CompiledBoundsError instead of
    reading the safe value / skipping the store (TileLang's rule)."""
    if tier not in TIERS:
        raise TilepyError(f"unknown JIT tier: expected one of {', '.join(TIERS)}; got {tier!r}",
                          hint='tier="py" runs the generated source without Numba')
    fuse = fast if fuse is None else bool(fuse)
    strict = bool(strict)
    ident = (id(func), fast, tier, fuse, strict)
    hit = _BY_ID.get(ident)
    if hit is not None and hit[0] is func:
        return hit[1]
    key = (func, fast, tier, fuse, strict)
    with _LOCK:
        k = _MEMORY.get(key)
        if k is None:
            k = _build(func, fast, tier, diskcache.enabled() if disk is None else disk, fuse,
                       strict)
            _MEMORY[key] = k
        _BY_ID[ident] = (func, k)
    return k


def run(func: PrimFunc, arrays: dict, sizes: dict, *, fast: bool = False,
        tier: str = "numba", fuse: bool | None = None, strict: bool = False) -> None:
    """Run `func` on `arrays` (outputs written in place) with symbolic `sizes` bound."""
    compile(func, fast=fast, tier=tier, fuse=fuse, strict=strict)(arrays, sizes)


def source(func: PrimFunc, *, strict: bool = False) -> str:
    """The generated Python for `func` (what `kernel.source` shows), without compiling."""
    return lower(func, strict=strict).source


def clear_memory_cache() -> None:
    with _LOCK:
        _MEMORY.clear()
        _BY_ID.clear()


def _build(func: PrimFunc, fast: bool, tier: str, disk: bool, fuse: bool,
           strict: bool = False) -> CompiledKernel:
    if tier == "numba":
        _refuse_breakpoints(func)
        configure_target()  # Numba's target before its first compile or load (numba_target.py)
    low = lower(func, fast=fast, fuse=fuse, strict=strict)
    key = diskcache.key(low.source, tier=tier, fast=fast, slp=low.slp)
    path, pyfunc = diskcache.load_module(func.name, key, low.source, low.entry)
    if tier == "py":
        pyfunc.__globals__.update(py_namespace(low.codecs))
        if fast:
            from tilepy.jit.fast import namespace

            pyfunc.__globals__.update(namespace(tier))
        fn = pyfunc
    else:
        cached = disk and diskcache.has_machine_code(path, low.entry)
        with compiling(func.name + (" [fast]" if fast else ""), cached):
            fn = _loaded(func, pyfunc, fast) if cached else None
            if fn is None:
                _numba_globals(pyfunc.__globals__, low, fast)
                fn = _njit(func, low, pyfunc, cache=disk, path=path, fast=fast)
    views = tuple(_view_dtype(p) for p in func.params)
    return CompiledKernel(func, low.source, tier, fast, path, fn, low.args, views,
                          low.blas_in_blocks)


def _numba_globals(g: dict, low: Lowered, fast: bool) -> None:
    """The generated module's helpers and block functions, as Numba compiles them."""
    import numba

    g.update(numba_namespace(low.codecs))
    extra = {}
    if fast:
        from tilepy.jit.fast import namespace, options

        g.update(namespace("numba"))
        extra = options()
    for name in low.blocks:  # plain njit functions, typed at the launch's call
        if not hasattr(g[name], "py_func"):
            # not cached on their own: compiled into the kernel's library (linkonce.py)
            g[name] = numba.njit(error_model="numpy", **extra)(g[name])


def _loaded(func: PrimFunc, pyfunc, fast: bool):
    """The kernel's machine code from the disk cache (jit/cacheload.py), or None. Loaded
    code calls nothing through the module's globals, so the helpers are not built for it
    (a third of a fresh process's load); a compile after a failed load builds them."""
    from tilepy.jit.cacheload import load

    if fast:  # what building the fast helpers did: BLAS's module loaded before a call
        from tilepy.jit.blas import load_blas

        load_blas()
    return load(pyfunc, signature(func), _opts(fast, cache=True))


def _opts(fast: bool, cache: bool) -> dict:
    opts = dict(parallel=True, error_model="numpy", cache=cache)
    if fast:
        from tilepy.jit.fast import options

        opts.update(options())
    return opts


def _refuse_breakpoints(func: PrimFunc) -> None:
    """Compiled code cannot stop in the debugger; say so at the user's breakpoint()."""
    for st in walk(func.body):
        if isinstance(st, Breakpoint):
            raise LoweringError(
                "breakpoint() cannot stop Numba-compiled code", loc=st.loc,
                hint='run this kernel with tilepy.backend("interp") (pdb with the '
                     'block\'s buffers as locals) or tilepy.backend("py") (pdb in the '
                     "generated code), or remove the breakpoint()")


def _view_dtype(p):
    return p.dtype.storage if storage_codec(p.dtype) is not None else None


def signature(func: PrimFunc):
    """The Numba signature of a kernel: C arrays of the storage dtypes (read-only for the
    parameters the kernel does not write, so read-only inputs are accepted; a writable
    array converts to that type), then int64 sizes."""
    from numba import from_dtype, types

    arrs, written = [], written_params(func)
    for p in func.params:
        np_dt = p.dtype.storage if storage_codec(p.dtype) is not None else p.dtype.np_dtype
        arrs.append(types.Array(from_dtype(np.dtype(np_dt)), p.ndim, "C",
                                readonly=p.name not in written))
    return types.none(*arrs, *([types.int64] * len(func.sizes)))


def _njit(func: PrimFunc, low: Lowered, pyfunc, cache: bool, path: str, fast: bool):
    """The kernel compiled now (the signature is explicit, so its block functions and
    helpers compile with it), with LLVM's SLP vectoriser as `low.slp` says; on after it,
    for whatever Numba compiles next in the process, as before that choice existed."""
    import numba

    numba.config.SLP_VECTORIZE = int(low.slp)  # gemm needs it, folds lose (Lowered.slp)
    try:
        return _njit_once(func, pyfunc, cache, path, fast, low.blocks)
    finally:
        numba.config.SLP_VECTORIZE = 1


def _njit_once(func: PrimFunc, pyfunc, cache: bool, path: str, fast: bool,
               blocks: tuple = ()):
    import numba

    opts = _opts(fast, cache)
    configure()  # before Numba refreshes its registries: no scipy.linalg (numba_target.py)
    try:
        with linked_once(blocks):
            return numba.njit(signature(func), **opts)(pyfunc)
    except Exception as e:  # noqa: BLE001 - typing errors, or a corrupted cache file
        if not (cache and diskcache.purge(path)):
            raise _internal(func, path, e) from None
    try:  # the cache entry was unreadable: it is gone now, rebuild it
        with linked_once(blocks):
            return numba.njit(signature(func), **opts)(pyfunc)
    except Exception as e:  # noqa: BLE001
        raise _internal(func, path, e) from None


def _internal(func: PrimFunc, path: str, e: Exception) -> LoweringError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    err = LoweringError(
        f"the JIT could not compile kernel '{func.name}' (a tilepy bug: {first[:200]})",
        loc=func.loc,
        hint=f"run it with tier='py' to step through the generated code ({path}), "
             "or with the interpreter backend; please report this")
    err.detail = str(e)
    return err
