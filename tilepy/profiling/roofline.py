"""This machine's roofline: peak float32 flops measured with numpy's BLAS sgemm and memory
bandwidth measured with a large parallel copy, once, then read from a JSON file in the tilepy
cache dir (keyed by CPU model, core count and numpy version); and the roofline PNG.
"""

from __future__ import annotations

import json
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

FILE = "roofline.json"


@dataclass(frozen=True)
class Roofline:
    """Peak GFLOP/s and GB/s, and how each was measured."""

    gflops: float
    gbs: float
    flops_source: str = "numpy float32 matmul"
    bytes_source: str = "parallel copy"
    cpu: str = ""

    @property
    def ridge(self) -> float:
        """The intensity (flop/byte) where the memory roof meets the compute roof."""
        return self.gflops / self.gbs


def cpu_id() -> str:
    """The CPU model and logical core count ("AMD EPYC ... x2"): part of cache keys."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} x{os.cpu_count()}"


def cache_root() -> Path:
    """The tilepy cache dir (TILEPY_CACHE_DIR, else the user cache dir): the JIT's folder's
    parent, so a fallback temporary folder is shared with it."""
    from tilepy.jit.diskcache import cache_dir  # a plain-Python module; loads no Numba

    return cache_dir().parent


def measure(n: int = 1024, copy_mb: int = 64, rounds: int = 5) -> Roofline:
    """Measure the peaks now: best of `rounds` n x n x n sgemms and of copies of `copy_mb`
    MiB split over the cores (numpy releases the GIL while copying)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(rounds))
    gflops = 2 * n**3 / best / 1e9
    src = np.ones(copy_mb * 2**20 // 8)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), os.cpu_count() or 1)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if p.size]
    with ThreadPoolExecutor(len(bounds)) as pool:
        copy = lambda: list(pool.map(lambda r: np.copyto(dst[r[0]:r[1]], src[r[0]:r[1]]),
                                     bounds))
        copy()
        best = min(_timed(copy) for _ in range(rounds))
    gbs = 2 * src.nbytes / best / 1e9  # read + write
    return Roofline(gflops, gbs, f"numpy float32 matmul {n}^3",
                    f"{len(bounds)}-thread copy of {copy_mb} MiB", cpu_id())


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def machine_roofline(refresh: bool = False) -> Roofline:
    """The measured roofline, from the cache dir's roofline.json when it was measured on
    this CPU with this numpy; else measured now (about a second) and saved. `refresh=True`
    measures again and keeps the higher of each peak (a busy machine measures low)."""
    path = cache_root() / FILE
    key = f"{cpu_id()} numpy {np.__version__}"
    saved = _read(path)
    old = None
    if isinstance(saved.get(key), dict):
        try:
            old = Roofline(**saved[key])
        except TypeError:
            old = None
    if old is not None and not refresh:
        return old
    roof = measure()
    if old is not None:
        roof = replace(roof, gflops=max(roof.gflops, old.gflops), gbs=max(roof.gbs, old.gbs))
    saved[key] = asdict(roof)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(saved, indent=1))
    os.replace(tmp, path)  # atomic: concurrent writers never leave half a file
    return roof


def _read(path: Path) -> dict:
    """The saved rooflines by key; an unreadable file reads as none (it is rewritten)."""
    try:
        saved = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in saved.items() if isinstance(v, dict)} if isinstance(
        saved, dict) else {}


def plot(rows, roof: Roofline, path) -> str:
    """Save a log-log roofline PNG: the two roofs and one point per profiled kernel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from tilepy.errors import TilepyError

        raise TilepyError("the roofline plot needs matplotlib; it is not installed",
                          hint="pip install 'tilepy-runtime[viz]'") from None
    xs = [r.intensity for r in rows if r.best_s and np.isfinite(r.intensity)] or [roof.ridge]
    lo, hi = min(min(xs), roof.ridge) / 8, max(max(xs), roof.ridge) * 8
    grid = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog(grid, np.minimum(roof.gflops, grid * roof.gbs), "k-",
              label=f"roof: {roof.gflops:.0f} GFLOP/s, {roof.gbs:.1f} GB/s")
    for r in rows:
        if r.best_s and np.isfinite(r.intensity) and r.gflops > 0:
            ax.loglog([r.intensity], [r.gflops], "o", label=f"{r.name} ({r.backend})")
    ax.set_xlabel("arithmetic intensity (flop / byte of global memory)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"roofline: {roof.cpu or cpu_id()}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return str(path)
