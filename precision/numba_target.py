"""The Numba code-generation target tilepy compiles for: full-width vectors on AVX-512 CPUs.

LLVM's tuning for AVX-512 server CPUs prefers 256-bit vectors (wide vectors lowered the
clock of early AVX-512 parts), so Numba code runs on half of such a CPU's vector width.
On the 2-vCPU Xeon (Sapphire Rapids) these figures were measured on, allowing 512-bit
vectors made the JIT's exact fp32 gemm 15-45% faster (bench/jit_bench.py --only matmul,
2026-11-30) and the fast float32 exp 1.3-1.8x, with the same bits (vector width never
changes what an exact kernel computes: the contract fixes every rounding).

`configure()` sets that preference on Numba's CPU target before Numba builds it (the target
machine is built once per process, at the first compile). It changes nothing when:
- the environment sets NUMBA_CPU_FEATURES (the user's choice wins),
- TILEPY_JIT_VECTOR_BITS=256 asks for LLVM's default,
- the CPU has no AVX-512,
- Numba already compiled something in this process (its target exists; kernels then get
  256-bit vectors and the same bits).
Only the tuning flag is added to the host's own feature list, so the code never uses an
instruction the CPU lacks. Every tilepy module that imports Numba calls this first.
"""

from __future__ import annotations

import os

_done = False


def configure() -> None:
    """Prefer 512-bit vectors in Numba code where the CPU has them (see the module doc)."""
    global _done
    if _done:
        return
    _done = True
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
