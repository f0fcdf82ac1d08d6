"""The disk cache: generated kernel modules as real files, so Numba's `cache=True` keeps
their machine code between processes (exec'd code has no cache locator). Owns the folder
(TILEPY_CACHE_DIR, else the user cache dir; an unwritable one is replaced by a temporary
folder, with one warning), the key (source, tier, options, the versions of tilepy, numba,
llvmlite, numpy and Python, jit/'s and the codecs' sources), atomic writes and purging a
corrupted entry. Never decides what is compiled.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from tilepy import __version__  # the package root: always loaded, imports nothing
from tilepy.precision.sourcefiles import write_once

MODULE_PREFIX = "tilepy_jit_cache"
# the precision modules whose njit code the generated kernels call (cache=True does not
# notice changes in callees, so their sources are part of the key)
_PRECISION = ("bits.py", "codecs.py", "codecs64.py", "codespec.py", "formats.py")


def cache_dir() -> Path:
    """TILEPY_CACHE_DIR, else $XDG_CACHE_HOME/tilepy, else ~/.cache/tilepy; then jit/.
    Where that folder cannot be made or written, a temporary folder for this process."""
    env = os.environ
    return _cache_dir(env.get("TILEPY_CACHE_DIR"), env.get("XDG_CACHE_HOME"), env.get("HOME"))


@lru_cache(maxsize=16)
def _cache_dir(root: str | None, xdg: str | None, home: str | None) -> Path:
    """cache_dir for these variables (every kernel call's traceback filter asks for it)."""
    if not root:
        base = xdg or os.path.join(Path.home(), ".cache")
        root = os.path.join(base, "tilepy")
    return _usable(Path(root) / "jit")


@lru_cache(maxsize=None)
def _usable(folder: Path) -> Path:
    """`folder` if files can be written in it, else a fresh temporary folder (one warning
    per folder and process, on the "tilepy" logger)."""
    problem = _unwritable(folder)
    if problem is None:
        return folder
    temp = tempfile.mkdtemp(prefix="tilepy-cache-")  # private to this user
    atexit.register(shutil.rmtree, temp, ignore_errors=True)
    fallback = Path(temp) / "jit"
    fallback.mkdir()
    logging.getLogger("tilepy").warning(
        "tilepy: the JIT cache folder %s cannot be written (%s); compiled kernels are "
        "cached in %s for this process instead. Set TILEPY_CACHE_DIR to a writable folder "
        "to keep them between runs.", folder, problem, fallback)
    return fallback


def _unwritable(folder: Path) -> str | None:
    """Why no file can be written in `folder` (made if missing), or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def enabled() -> bool:
    """Numba machine code is cached on disk unless TILEPY_JIT_DISK_CACHE=0."""
    return os.environ.get("TILEPY_JIT_DISK_CACHE", "1") not in ("0", "false", "no")


@lru_cache(maxsize=1)
def _versions() -> str:
    import llvmlite
    import numba
    import numpy

    here = Path(__file__).parent
    own = hashlib.sha256()
    for p in sorted(here.glob("*.py")) + [here.parent / "precision" / f for f in _PRECISION]:
        if p.exists():
            own.update(p.read_bytes())
    return "|".join([__version__, numba.__version__, llvmlite.__version__,
                     numpy.__version__, sys.version.split()[0], own.hexdigest()[:16]])


def key(source: str, *, tier: str, fast: bool, slp: bool = True) -> str:
    h = hashlib.sha256()
    parts = (source, tier, str(fast), _versions()) + (() if slp else ("no SLP",))
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def module_path(name: str, k: str) -> Path:
    safe = "".join(c if c.isalnum() else "_" for c in name)[:40]
    return cache_dir() / f"{safe}_{k}.py"


def load_module(name: str, k: str, source: str, entry: str):
    """Write the module (once, atomically), import it under a unique name, return
    (path, the plain Python function)."""
    path = module_path(name, k)
    write_once(path, source)
    modname = f"{MODULE_PREFIX}.{path.stem}"
    mod = sys.modules.get(modname)
    if mod is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[modname] = mod
    return str(path), getattr(mod, entry)



def has_machine_code(path: str, entry: str) -> bool:
    """Whether Numba's cache holds an index for the function `entry` of the module at
    `path` (then compiling it loads machine code instead of compiling). Numba names the
    index after the module, the function and the line of its `def`, so one file is looked
    for, not the whole cache folder listed."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError:
        return False
    head = f"def {entry}("
    line = next((n for n, t in enumerate(text.splitlines(), 1) if t.startswith(head)), None)
    if line is None:
        return False
    abi = getattr(sys, "abiflags", "")
    name = f"{p.stem}.{entry}-{line}.py{sys.version_info[0]}{sys.version_info[1]}{abi}.nbi"
    return (p.parent / "__pycache__" / name).is_file()


def purge(path: str) -> bool:
    """Remove Numba's cache files of one module (after a failed load); True if any."""
    p = Path(path)
    found = False
    for d in (p.parent / "__pycache__", p.parent):
        for f in d.glob(f"{p.stem}.*"):
            if f.suffix in (".nbi", ".nbc"):
                f.unlink(missing_ok=True)
                found = True
    return found
