"""A compile worker: `python -m tilepy.tuning.worker IN OUT` compiles the pickled PrimFuncs
in IN into the JIT's disk cache and pickles (index, seconds or error text, pid) to OUT. Its
own process (not multiprocessing), so a user's script is never re-imported in it.
"""

from __future__ import annotations

import os
import pickle
import sys
import time


def main(argv: list[str]) -> int:
    src, dst = argv
    with open(src, "rb") as f:
        items, fast, strict = pickle.load(f)
    from tilepy.jit.compiler import compile as jit_compile

    done = []
    for i, func in items:
        t = time.perf_counter()
        try:
            jit_compile(func, fast=fast, strict=strict, disk=True)
            done.append((i, time.perf_counter() - t, os.getpid()))
        except Exception as err:  # noqa: BLE001 - reported; the parent measures the rest
            done.append((i, f"{type(err).__name__}: {err}", os.getpid()))
    with open(dst, "wb") as f:
        pickle.dump(done, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
