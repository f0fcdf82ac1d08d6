"""Test-wide settings: hypothesis profiles (`ci` fixed seed, `thorough` for local runs), and
the backend of kernels called without one.

The library's default backend is the JIT. Here a kernel called outside any
`tilepy.backend(...)` block runs in the reference interpreter (TILEPY_BACKEND=interp unless
the environment already says otherwise): most tests check values and errors against the
reference semantics, and a Numba compile per test kernel would cost 1-2 s each. The JIT is
tested where tests choose it (tests/jit, which compares it with the interpreter bit for bit);
tests/jit/test_api.py checks the library default itself.
"""

import os

os.environ.setdefault("TILEPY_BACKEND", "interp")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("TILEPY_HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "exhaustive: slow exhaustive sweeps (make test-exhaustive)")
    config.addinivalue_line("markers", "mpi: runs under mpiexec")
