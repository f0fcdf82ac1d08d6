"""Loading a kernel's machine code from Numba's disk cache without Numba's registries.

Before any cache load Numba refreshes its typing and lowering registries, which imports
most of its builtin, array, random and typed-container libraries: about a third of a
fresh process's cached load, though machine code needs only the runtime (NRT) and the
symbols its C helpers register. `load` sets those up and reads the entry with Numba's own
cache object; anything else (no entry, a stale or unreadable one, a Numba whose internals
differ) returns None and the caller takes Numba's ordinary path, which compiles after a
full refresh. Numba refreshes before every compile, so skipping it here changes nothing
for what is compiled later in the process.
"""

from __future__ import annotations


def load(pyfunc, sig, opts: dict):
    """A dispatcher of `pyfunc` (njit options `opts`, cache=True) holding the cached machine
    code for `sig`, compiling disabled as with `njit(sig)`; None where the cache does not
    serve it."""
    try:
        import numba
        import numba.cpython.hashing  # noqa: F401 - registers the hash secret's symbols
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import rtsys
    except ImportError:
        return None
    disp = numba.njit(**opts)(pyfunc)  # without a signature: compiles nothing yet
    cache, ctx = getattr(disp, "_cache", None), getattr(disp, "targetctx", None)
    if not all(hasattr(cache, a) for a in ("_load_overload", "_guard_against_spurious_io_errors")):
        return None
    with global_compiler_lock:
        try:
            rtsys.initialize(ctx)  # what Numba's refresh does first: the runtime's symbols
            with cache._guard_against_spurious_io_errors():
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
