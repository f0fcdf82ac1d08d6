"""Loading a kernel's machine code from Numba's disk cache without Numba's registries.

Before any cache load Numba refreshes its typing and lowering registries, which imports
most of its builtin, array, random and typed-container libraries: about a third of a
fresh process's cached load, though machine code needs only the runtime (NRT) and the
symbols its C helpers register. `load` sets those up and reads the entry with Numba's own
cache object. The runtime's own small LLVM library (NRT's atomic reference counts), which
Numba compiles in every process, is kept as object code beside the kernels (`_nrt_cached`),
as Numba keeps a kernel's. Anything else (no entry, a stale or unreadable one, a Numba
whose internals differ) returns None and the caller takes Numba's ordinary path, which
compiles after a full refresh. Numba refreshes before every compile, so skipping it here
changes nothing for what is compiled later in the process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import tempfile


def load(pyfunc, sig, opts: dict):
    """A dispatcher of `pyfunc` (njit options `opts`, cache=True) holding the cached machine
    code for `sig`, compiling disabled as with `njit(sig)`; None where the cache does not
    serve it."""
    try:
        import numba
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import rtsys
    except ImportError:
        return None
    disp = numba.njit(**opts)(pyfunc)  # without a signature: compiles nothing yet
    cache, ctx = getattr(disp, "_cache", None), getattr(disp, "targetctx", None)
    if not all(hasattr(cache, a) for a in ("_load_overload", "_guard_against_spurious_io_errors")):
        return None
    _hash_secret_when_used(cache)
    with global_compiler_lock:
        try:
            with _nrt_cached():
                rtsys.initialize(ctx)  # what Numba's refresh does first: the runtime
            with cache._guard_against_spurious_io_errors(), _light_environments():
                cres = cache._load_overload(sig, ctx)
            if cres is None or cres.objectmode:
                return None
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            disp.add_overload(cres)
            disp._cache_hits[sig] += 1
        except Exception:  # noqa: BLE001 - an unreadable entry: Numba's own path decides
            return None
    disp.disable_compile()
    return disp


def _hash_secret_when_used(cache) -> None:
    """Numba's hashing module registers the symbols of Python's hash secret, which only
    code that hashes reads: it is imported before the entry is loaded when the entry's
    object code names them (a byte search of the data file), else not (with its unicode
    library it is a tenth of a fresh process's load)."""
    cf = getattr(cache, "_cache_file", None)
    real = getattr(cf, "_load_data", None)
    if real is None or not hasattr(cf, "_data_path"):
        import numba.cpython.hashing  # noqa: F401
        return

    def load_data(name):
        with open(cf._data_path(name), "rb") as fh:
            if b"_numba_hashsecret_" in fh.read():
                import numba.cpython.hashing  # noqa: F401
        return real(name)

    cf._load_data = load_data


@contextlib.contextmanager
def _light_environments():
    """While an entry is unpickled: the environment of a function whose module is not
    imported yet and that holds no constants gets a globals dict of its own instead of the
    module's, which would be imported for it (numba.np.arrayobj for np.empty, another
    tenth of the load). Only object-mode code reads an environment's globals, and a cached
    entry has none (`load` refuses object mode)."""
    try:
        from numba.core import environment as envs
    except ImportError:
        yield
        return
    real = envs._rebuild_env

    def rebuild(modname, consts, env_name):
        if modname in sys.modules or consts or envs.lookup_environment(env_name) is not None:
            return real(modname, consts, env_name)
        env = envs.Environment({"__name__": modname})
        env.env_name = env_name
        envs.Environment._memo[env_name] = env
        return env

    envs._rebuild_env = rebuild
    try:
        yield
    finally:
        envs._rebuild_env = real


@contextlib.contextmanager
def _nrt_cached():
    """While Numba's runtime starts: its LLVM library loaded from the cache folder where an
    entry for this Numba, llvmlite and target exists, else compiled as Numba does and
    written there. Anything unexpected compiles it as Numba does."""
    try:
        from numba.core.runtime import nrtdynmod
    except ImportError:
        yield
        return
    real = nrtdynmod.compile_nrt_functions

    def compile_nrt_functions(ctx):
        try:
            return _nrt_library(ctx, nrtdynmod)
        except Exception:  # noqa: BLE001 - Numba's own way
            return real(ctx)

    nrtdynmod.compile_nrt_functions = compile_nrt_functions
    try:
        yield
    finally:
        nrtdynmod.compile_nrt_functions = real


def _nrt_library(ctx, nrtdynmod):
    import llvmlite
    import numba
    from numba.core import config

    from tilepy.jit.diskcache import cache_dir

    codegen = ctx.codegen()
    key = repr((numba.__version__, llvmlite.__version__, codegen.magic_tuple(), config.OPT,
                config.NRT_STATS, config.DEBUG_NRT))
    path = cache_dir() / "numba_nrt.pkl"
    try:
        with open(path, "rb") as fh:
            stored, state = pickle.load(fh)
        if stored == key:
            return codegen.unserialize_library(state)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):
        pass
    ir_mod, library = nrtdynmod.create_nrt_module(ctx)  # compile_nrt_functions' steps,
    library.enable_object_caching()  # keeping the object code
    library.add_ir_module(ir_mod)
    library.finalize()
    _write(path, pickle.dumps((key, library.serialize_using_object_code())))
    return library


def _write(path, data: bytes) -> None:
    """Atomically; a folder that cannot be written is left as it is."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
