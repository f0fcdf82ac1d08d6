"""Generated Python modules on disk for Numba's `cache=True`: written once, atomically,
and left alone while identical (Numba keys its cache index by the file's time stamp)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_once(path: Path, source: str) -> None:
    """Leave an identical file alone; write a missing or different (corrupted) one
    atomically."""
    try:
        if path.read_text() == source:
            return
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(source)
    os.replace(tmp, path)
