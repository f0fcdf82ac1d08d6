"""The Numba code-generation target tilepy compiles for: 512-bit vectors on AVX-512 CPUs, whose
LLVM tuning prefers 256-bit ones (wide vectors lowered the clock of early AVX-512 parts).
Vector width never changes an exact kernel's bits (the contract fixes every rounding); its
speed-up is in docs/perf-log.md. tilepy compiles Numba code only after `configure()` ran:
from codecs.py (which every precision Numba module imports) or from jit/compiler.py. It
also keeps Numba's start from importing scipy.linalg where no code uses BLAS.
`configure_target()` is the first part alone, for code that may only load cached machine
code (jit/cacheload.py) and calls `configure()` before anything compiles.
"""

from __future__ import annotations

import os

_done = False


def configure() -> None:
    """`configure_target()`, and Numba's array library imported without its BLAS check
    (`_defer_blas_check`). Run it before Numba compiles or refreshes its registries."""
    configure_target()
    _defer_blas_check()


def configure_target() -> None:
    """Prefer 512-bit vectors in Numba code where the CPU has them. Numba builds its target
    machine once per process, at its first compile, so this must run before that. It
    changes nothing when:
    - the environment sets NUMBA_CPU_FEATURES or NUMBA_CPU_NAME (the user's choice wins),
    - TILEPY_JIT_VECTOR_BITS=256 asks for LLVM's default,
    - the CPU has no AVX-512,
    - Numba already compiled something in this process (its target exists; kernels then
      get 256-bit vectors and the same bits).
    Only the tuning flag is added to the host's own feature list, so the code never uses
    an instruction the CPU lacks."""
    global _done
    if _done:
        return
    _done = True
    _prefer_512_bit_vectors()


def _prefer_512_bit_vectors() -> None:
    if os.environ.get("TILEPY_JIT_VECTOR_BITS", "512") == "256":
        return
    from numba.core import config, registry

    if config.CPU_FEATURES is not None or config.CPU_NAME is not None:
        return
    if "_toplevel_target_context" in vars(registry.cpu_target):
        return  # Numba's target machine already exists
    from numba.core.codegen import get_host_cpu_features

    features = get_host_cpu_features()
    if "+avx512f" in features.split(","):
        config.CPU_FEATURES = features + ",-prefer-256-bit"


def _defer_blas_check() -> None:
    """Numba's array library, imported during its first compile (or cache load), checks
    that scipy's BLAS loads by importing scipy.linalg: about a fifth of the CPU time of
    loading a cached kernel in a fresh process, though only code calling BLAS (np.dot,
    tilepy's fast gemm) needs it, and such code imports it when it is compiled or built
    (numba.np.linalg's own checks; jit/blas.py). So import that library here with the
    check answered by finding scipy without importing it, then restore the check."""
    import importlib.util
    import sys

    if "numba.np.arraymath" in sys.modules:
        return
    from numba.np import linalg

    real = getattr(linalg, "ensure_blas", None)
    if real is None:  # a Numba without this check: nothing to defer
        return

    def scipy_found() -> None:
        if importlib.util.find_spec("scipy") is None:
            real()  # raises Numba's own ImportError

    linalg.ensure_blas = scipy_found
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        linalg.ensure_blas = real
