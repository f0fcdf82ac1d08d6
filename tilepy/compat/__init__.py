"""TileLang compatibility mode: `import tilelang` (and `tvm`) resolving to tilepy's stand-ins
(tilepy/compat/tilelang, tilepy/compat/tvm), so an unchanged TileLang program runs on the
CPU. Opt-in (`tilepy.compat.install()`, `tilepy run --tilelang prog.py`), and never over a
real TileLang installation unless `force=True`. Decides no semantics.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIASED = ("tilelang", "tvm")


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `tilelang.x.y` as `tilepy.compat.tilelang.x.y` (the same module object)."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in ALIASED:
            return None
        if importlib.util.find_spec("tilepy.compat." + fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module("tilepy.compat." + spec.name)

    def exec_module(self, module):
        pass  # imported already by create_module


_FINDER = _Alias()


def real_tilelang_installed() -> bool:
    """Whether an import of `tilelang` would find a real TileLang (not this stand-in)."""
    if _FINDER in sys.meta_path:
        return False
    return importlib.util.find_spec("tilelang") is not None


def install(*, force: bool = False, cuda_to_cpu: bool = False) -> bool:
    """Make `import tilelang` / `import tvm` give tilepy's stand-ins. Returns False (and
    changes nothing) when a real TileLang is installed, unless `force`. `cuda_to_cpu`:
    torch tensors created on "cuda" are created on the CPU instead (torch_bridge)."""
    if cuda_to_cpu:
        from tilepy.compat.cuda_to_cpu import patch

        patch()
    if _FINDER in sys.meta_path:
        return True
    if not force and real_tilelang_installed():
        return False
    for name in list(sys.modules):
        if name.split(".")[0] in ALIASED:
            del sys.modules[name]  # a real one imported before: the stand-in replaces it
    sys.meta_path.insert(0, _FINDER)
    return True


def uninstall() -> None:
    """Undo `install` (modules imported through it stay imported where they were bound)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in list(sys.modules):
        if name.split(".")[0] in ALIASED:
            del sys.modules[name]
