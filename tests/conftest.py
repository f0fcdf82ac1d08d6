"""Test-wide settings: hypothesis profiles (`ci` fixed seed, `thorough` for local runs)."""

import os

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
