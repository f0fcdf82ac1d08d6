"""Static (ahead-of-time) compilation: fill the disk cache so later processes start without
compiling. `precompile(items)` compiles PrimFuncs or Kernels (via `.func`) with the disk
cache on; `python -m tilepy.jit.aot MODULE...` compiles each module's top-level kernels and
its `__tilepy_aot__` list (kernels built with arguments). Decides nothing about lowering.
"""

from __future__ import annotations

import importlib
import sys
import time

from tilepy.ir.stmt import PrimFunc


def _func_of(x) -> PrimFunc | None:
    if isinstance(x, PrimFunc):
        return x
    f = getattr(x, "func", None)
    return f if isinstance(f, PrimFunc) else None


def kernels_of(module) -> list[PrimFunc]:
    """The PrimFuncs a module defines at top level, then those in `__tilepy_aot__`."""
    found: list[PrimFunc] = []
    items = list(vars(module).values()) + list(getattr(module, "__tilepy_aot__", ()))
    for x in items:
        f = _func_of(x)
        if f is not None and f not in found:
            found.append(f)
    return found


def precompile(items, *, fast: bool = False) -> list[tuple[str, float, str]]:
    """Compile each PrimFunc / Kernel into the disk cache; (name, seconds, module path)."""
    from tilepy.jit.compiler import compile as jit_compile

    out = []
    for x in items:
        f = _func_of(x)
        if f is None:
            raise TypeError(f"not a kernel: {x!r}")
        t = time.perf_counter()
        k = jit_compile(f, fast=fast, disk=True)
        out.append((f.name, time.perf_counter() - t, k.path))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m tilepy.jit.aot MODULE [MODULE ...]", file=sys.stderr)
        return 2
    for name in args:
        mod = importlib.import_module(name)
        for kname, secs, path in precompile(kernels_of(mod)):
            print(f"{name}.{kname}: {secs:.2f} s -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
