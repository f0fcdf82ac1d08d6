"""`tilelang.cache`: TileLang's kernel cache controls, mapped to tilepy's JIT caches (the
compiled kernels kept in memory by IR hash, and the disk cache under TILEPY_CACHE_DIR)."""

from __future__ import annotations

import shutil


def clear_cache() -> None:
    """Forget every compiled kernel: in memory, and the disk cache's files (the next call
    of each kernel compiles it again, as after TileLang's clear_cache)."""
    from tilepy.jit import compiler, diskcache

    compiler.clear_memory_cache()
    folder = diskcache.cache_dir()
    for entry in folder.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def disable_cache() -> None:
    """See tilelang.disable_cache."""


def enable_cache() -> None:
    """See tilelang.enable_cache."""
