"""Compiling tuning candidates in parallel: the JIT's compiles split over worker processes
(tilepy/tuning/worker.py), each filling the disk cache, so that the tuning process then loads
machine code instead of compiling. Only for the Numba tier with the disk cache on.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile


def should_compile(backend: str, n: int, workers: int) -> bool:
    if backend != "jit" or n < 2 or workers < 2:
        return False
    from tilepy.jit import diskcache  # plain Python: loads no Numba

    return diskcache.enabled()


def on_disk(func, options: dict) -> bool:
    """Whether the JIT's disk cache already holds `func`'s machine code for these options
    (then loading it is cheaper than starting a worker)."""
    from tilepy.jit import diskcache
    from tilepy.jit.lower import lower

    fast, strict = bool(options.get("fast")), bool(options.get("strict"))
    low = lower(func, fast=fast, fuse=fast, strict=strict)
    path = diskcache.module_path(func.name, diskcache.key(low.source, tier="numba", fast=fast,
                                                          slp=low.slp))
    return path.is_file() and diskcache.has_machine_code(str(path), low.entry)


def precompile(funcs: list, options: dict, workers: int, bar=None) -> dict:
    """Compile `funcs` over `workers` processes; {index: (seconds or error text, pid)}."""
    fast, strict = bool(options.get("fast")), bool(options.get("strict"))
    shares = [[(i, f) for i, f in enumerate(funcs) if i % workers == w] for w in range(workers)]
    shares = [s for s in shares if s]
    with tempfile.TemporaryDirectory(prefix="tilepy-tune-") as tmp:
        procs = []
        for w, share in enumerate(shares):
            src, dst = os.path.join(tmp, f"in{w}"), os.path.join(tmp, f"out{w}")
            with open(src, "wb") as f:
                pickle.dump((share, fast, strict), f)
            procs.append((subprocess.Popen(
                [sys.executable, "-m", "tilepy.tuning.worker", src, dst],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), dst, share))
        out = {}
        for proc, dst, share in procs:
            _, err = proc.communicate()
            if proc.returncode == 0 and os.path.exists(dst):
                with open(dst, "rb") as f:
                    out.update({i: (r, pid) for i, r, pid in pickle.load(f)})
            else:  # the worker died: these are compiled (and fail, if they do) in the tuner
                text = err.decode(errors="replace").strip().splitlines()[-1:] or ["died"]
                out.update({i: (f"worker: {text[0]}", None) for i, _ in share})
            if bar is not None:
                bar.update(len(share))
    return out
