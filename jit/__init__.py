"""tilepy.jit: lowers tile IR to readable Python source and compiles it with Numba.

jit/ never decides semantics; it only transcribes the op table (ir/ops.py) and the
statement semantics of the interpreter. Importing it does not import numba; compiling does.

    tilepy.jit.run(func, arrays, sizes, *, fast=False, tier="numba") -> None
    tilepy.jit.compile(func, *, fast=False, tier="numba") -> CompiledKernel (.source)
    tilepy.jit.source(func) -> str (the generated Python, without compiling)
"""

from tilepy.jit.compiler import (
    TIERS,
    CompiledKernel,
    clear_memory_cache,
    compile,
    run,
    source,
)

__all__ = ["TIERS", "CompiledKernel", "clear_memory_cache", "compile", "run", "source"]
