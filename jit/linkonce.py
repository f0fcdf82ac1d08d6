"""Putting a kernel's block functions through LLVM once, in the kernel's own library.

Numba runs the O3 pipeline and emits machine code for every library it finalises, and
links each callee's IR into its caller's library: a launch's block body went through LLVM
five times (its own library, the parfor gufunc, the gufunc wrapper, the parallel wrapper
and the kernel). While `linked_once(blocks)` is active in this thread, the libraries of
those block functions and of Numba's parfor wrappers are finalised as IR only: the kernel's
library links them and optimises and emits them once, with itself. Their own entry points
are never called (the kernel calls its linked copies), so they get no machine code; the
block functions must therefore not be cached by Numba on their own (compiler.py).
A Numba without these internals is left as it is (the compile is then only slower).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

_STATE = threading.local()
_PARFOR_LIBS = ("__numba_parfor_gufunc_", "<numba.np.ufunc.wrappers._GufuncWrapper",
                "parallelgufuncwrapper")
_installed: bool | None = None


@contextmanager
def linked_once(blocks):
    """Within: the named block functions' and parfor wrappers' libraries are IR only."""
    if not _install():
        yield
        return
    _STATE.blocks, _STATE.envs = frozenset(blocks), []
    try:
        yield
    finally:
        _STATE.blocks = None
        for set_env, codegen, name, env in _STATE.envs:  # now in the kernel's machine code
            if codegen._engine.is_symbol_defined(name):
                set_env(codegen, name, env)
        _STATE.envs = []


def _deferred(library) -> bool:
    blocks = getattr(_STATE, "blocks", None)
    if not blocks:
        return False
    name = library.name
    return name in blocks or name.startswith(_PARFOR_LIBS)


def _install() -> bool:
    """Wrap Numba's finalisation steps once per process; False where they are not found."""
    global _installed
    if _installed is not None:
        return _installed
    from numba.core import codegen as cg

    lib, gen = cg.CPUCodeLibrary, getattr(cg, "JITCPUCodegen", None)
    needed = ((lib, "_optimize_final_module"), (lib, "_finalize_final_module"),
              (lib, "_finalize_dynamic_globals"), (lib, "_verify_declare_only_symbols"),
              (gen, "set_env"))
    _installed = all(hasattr(c, a) for c, a in needed)
    if _installed:
        _wrap(lib, gen)
    return _installed


def _wrap(lib, gen) -> None:
    optimize, finalize, set_env = (lib._optimize_final_module, lib._finalize_final_module,
                                   gen.set_env)

    def _optimize_final_module(self):
        if not _deferred(self):  # else the kernel's library optimises the linked copy
            optimize(self)

    def _finalize_final_module(self):
        if not _deferred(self):
            return finalize(self)
        self._finalize_dynamic_globals()  # what finalising does short of machine code
        self._verify_declare_only_symbols()
        self._finalized = True

    def _set_env(self, env_name, env):
        if getattr(_STATE, "blocks", None) and not self._engine.is_symbol_defined(env_name):
            _STATE.envs.append((set_env, self, env_name, env))  # set once the kernel is built
            return
        set_env(self, env_name, env)

    lib._optimize_final_module = _optimize_final_module
    lib._finalize_final_module = _finalize_final_module
    gen.set_env = _set_env
