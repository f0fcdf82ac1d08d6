"""Tile sizes for a tile op, from a small cost model of this machine's data caches.

Caches come from /sys/devices/system/cpu/cpu0/cache (else os.sysconf, else 32 KiB L1 and
1 MiB L2). A contraction keeps its accumulator tile and one B tile in L1 (they are touched
every k step) and maximises reuse, bm * bn / (bm + bn) flops per loaded element; row and
element-wise kernels take the widest rows (so a reduction over a row is done once per row)
whose fragments fit a quarter of L2. Sizes are powers of two; the user's `tiles=` win.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

_SYS = "/sys/devices/system/cpu/cpu0/cache"
L1_DEFAULT, L2_DEFAULT = 32 * 1024, 1024 * 1024


@dataclass(frozen=True)
class Caches:
    l1: int  # bytes of level-1 data cache per core
    l2: int  # bytes of level-2 cache per core


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@functools.lru_cache(maxsize=1)
def caches() -> Caches:
    """The data caches of cpu0, with defaults for what cannot be read."""
    found: dict[int, int] = {}
    try:
        for entry in sorted(os.listdir(_SYS)):
            d = os.path.join(_SYS, entry)
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "size")) as f:
                size = _parse_size(f.read())
            if kind in ("Data", "Unified"):
                found.setdefault(level, size)
    except (OSError, ValueError):
        pass
    for level, name in ((1, "SC_LEVEL1_DCACHE_SIZE"), (2, "SC_LEVEL2_CACHE_SIZE")):
        if level not in found:
            try:
                v = os.sysconf(name)
                if v > 0:
                    found[level] = v
            except (ValueError, OSError, AttributeError):
                pass
    return Caches(found.get(1, L1_DEFAULT), found.get(2, L2_DEFAULT))


def gemm_tiles(in_bytes: int, acc_bytes: int, c: Caches | None = None) -> tuple[int, int, int]:
    """(bm, bn, bk) for a contraction: accumulator tile + B tile within 3/4 of L1, the
    three tiles within half of L2; most reuse, then the largest bk (fewest k steps)."""
    c = c or caches()
    best = None
    for bm in (16, 32, 64, 128, 256):
        for bn in (16, 32, 64, 128, 256):
            for bk in (8, 16, 32, 64, 128):
                hot = bm * bn * acc_bytes + bk * bn * in_bytes
                total = hot + bm * bk * in_bytes
                if hot > 3 * c.l1 // 4 or total > c.l2 // 2:
                    continue
                key = (bm * bn / (bm + bn), min(bm, bn), bk)
                if best is None or key > best[0]:
                    best = (key, (bm, bn, bk))
    return best[1] if best else (16, 16, 8)


def row_tiles(bytes_per_row_element: int, c: Caches | None = None,
              widest: int = 1024) -> tuple[int, int]:
    """(bm, bn) for a row or element-wise kernel: bn as wide as `widest`, then bm rows so
    that bm * bn * bytes_per_row_element (all of a block's fragments) fits a quarter of L2."""
    c = c or caches()
    bn = widest
    bm = 1
    while bm < 64 and 2 * bm * bn * bytes_per_row_element <= c.l2 // 4:
        bm *= 2
    return bm, bn


def b2b_tiles() -> tuple[int, int, int, int]:
    """(bm, bn, bh, be) for back-to-back contractions (tilepy/tileop/backtoback.py): rows,
    output columns, the chunk of the inner result's columns, the inner reduction's chunk."""
    return 64, 256, 64, 32
