"""precision/numba_target.py: Numba's target prefers 512-bit vectors where the CPU has
AVX-512, unless the user or an earlier compile decided otherwise. Each case runs in a fresh
process (the target machine is built once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import json, sys
first = sys.argv[1]
if first == "numba":  # something compiled before tilepy's first compile
    import numba
    numba.njit(lambda x: x + 1)(1)
from tilepy.precision.numba_target import configure
configure()
import numba
from numba.core import registry
from numba.core.codegen import get_host_cpu_features
numba.njit(lambda x: x * 2)(3)
used = registry.cpu_target.target_context.codegen()._tm_features.split(",")
print(json.dumps({"avx512": "+avx512f" in get_host_cpu_features().split(","),
                  "wide": "-prefer-256-bit" in used}))
"""


def _run(first: str, **env) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_FEATURES",
                                                          "TILEPY_JIT_VECTOR_BITS")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", _SCRIPT, first], env=e, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_wide_vectors_on_avx512_and_only_there():
    r = _run("tilepy")
    assert r["wide"] == r["avx512"]


@pytest.mark.parametrize("first, env", [
    ("tilepy", {"TILEPY_JIT_VECTOR_BITS": "256"}),  # asked for LLVM's default
    ("numba", {}),  # Numba's target already built: left as it is
])
def test_the_default_target_is_kept_when_asked_or_too_late(first, env):
    assert _run(first, **env)["wide"] is False


_BLAS_SCRIPT = r"""
import sys
import numpy as np
from tilepy.precision.numba_target import configure
configure()
import numba
numba.njit(lambda x: x * 2)(3)
started = "scipy.linalg" in sys.modules
a = np.arange(6.0).reshape(2, 3)
got = numba.njit(lambda x, y: np.dot(x, y))(a, a.T)  # BLAS still works, scipy loaded now
print(started, "scipy.linalg" in sys.modules, got.tolist())
"""


def test_numbas_start_does_not_import_scipy_linalg_until_blas_is_used():
    out = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT], check=True,
                         capture_output=True, text=True)
    assert out.stdout.split("\n")[0] == "False True [[5.0, 14.0], [14.0, 50.0]]"
