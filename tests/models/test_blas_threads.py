"""Fast mode's BLAS thread count on the models' launch path: BLAS runs on one thread in
every fast kernel (whole products are panels over Numba's threads); the count is restored
after each call. No kernel is compiled here (the compile is faked; BLAS's thread control is
a fake library)."""

import os
from types import SimpleNamespace

import pytest

import tilepy.jit
from tilepy.jit import blas
from tilepy.models.kernels import launch as L


@pytest.fixture
def fake_blas(monkeypatch):
    """BLAS's thread count as a list cell behind blas._openblas's (get, set)."""
    cell = [2]

    def put(n):
        cell[0] = n
    monkeypatch.setattr(blas, "_openblas", lambda: (lambda: cell[0], put))
    return cell


def _seen(cell):
    """A stand-in kernel that records BLAS's thread count while it runs."""
    seen = []
    return seen, lambda *args: seen.append((cell[0], args))


def test_call_one_thread_sets_the_count_for_the_call_and_restores_it(fake_blas):
    seen, fn = _seen(fake_blas)
    blas.call_one_thread(fn, "a")
    assert seen == [(1, ("a",))] and fake_blas[0] == 2


@pytest.mark.parametrize("policy", ["PASSIVE", None])
def test_every_fast_blas_launch_runs_blas_on_one_thread(monkeypatch, policy):
    """Whole products are cut into panels over Numba's threads, so under any OpenMP
    policy a fast kernel that calls BLAS runs it on one thread; exact kernels never call
    it."""
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    ck = SimpleNamespace(fn=object(), views=(None,), blas_in_blocks=True)
    monkeypatch.setattr(tilepy.jit, "compile", lambda func, fast: ck)
    kernel = SimpleNamespace(func=None)
    assert L._compile(kernel, fast=True) == (ck.fn, None, blas.call_one_thread)
    assert L._compile(kernel, fast=False)[2] is None  # exact mode never calls BLAS
    ck.blas_in_blocks = False
    assert L._compile(kernel, fast=True)[2] is None


def test_loading_blas_asks_its_idle_threads_to_sleep_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    blas.load_blas()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "4"
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "20")
    blas.load_blas()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "20"
