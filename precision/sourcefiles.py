"""Generated Python modules on disk for Numba's `cache=True`: written once, atomically,
and left alone while identical (Numba keys its cache index by the file's time stamp)."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import tempfile
from pathlib import Path


def write_once(path: Path, source: str) -> None:
    """Leave an identical file alone; write a missing or different (corrupted) one
    atomically, with its bytecode."""
    try:
        if path.read_text() == source:
            _bytecode(path, missing_only=True)
            return
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(source)
    os.replace(tmp, path)
    _bytecode(path, missing_only=False)


def _bytecode(path: Path, missing_only: bool) -> None:
    """The module's .pyc in __pycache__, written even where PYTHONDONTWRITEBYTECODE is set
    (Python still reads it): else every process compiles the generated source again when
    it imports it, a tenth of loading a cached gemm (docs/perf-log.md)."""
    pyc = importlib.util.cache_from_source(str(path))
    if missing_only and os.path.exists(pyc):
        return
    try:
        py_compile.compile(str(path), cfile=pyc, doraise=True)
    except (OSError, py_compile.PyCompileError):  # a read-only folder: import compiles it
        pass
