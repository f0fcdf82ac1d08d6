"""tilepy.jit: lowers tile IR to readable Python source and compiles it with Numba: `run`,
`compile` (a CompiledKernel; `.source`) and `source` (docs/jit.md, with a module map).

jit/ never decides semantics; it only transcribes the op table (ir/ops.py) and the
statement semantics of the interpreter. Importing it does not import numba; compiling does.
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
