"""Fast mode's BLAS thread count on the models' launch path: a launch that is one BLAS call
gets the launch path's threads where Numba's idle workers sleep, BLAS inside blocks stays
on one thread; the count is restored after each call. No kernel is compiled here (the
compile is faked; BLAS's thread control is a fake library)."""

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


def test_call_threads_sets_the_count_for_the_call_and_restores_it(fake_blas):
    seen, fn = _seen(fake_blas)
    blas.call_threads(1, fn, "a")
    fake_blas[0] = 1
    blas.call_threads(2, fn, "b")
    blas.call_one_thread(fn, "c")
    assert seen == [(1, ("a",)), (2, ("b",)), (1, ("c",))]
    assert fake_blas[0] == 1


@pytest.mark.parametrize("policy, whole", [("PASSIVE", True), ("passive", True),
                                           ("ACTIVE", False), (None, False)])
@pytest.mark.parametrize("in_blocks", [False, True])
def test_a_whole_blas_launch_gets_the_threads_only_where_idle_workers_sleep(
        monkeypatch, policy, whole, in_blocks):
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    ck = SimpleNamespace(fn=object(), views=(None,), source="_gemm_acc(A, B, C)",
                         blas_in_blocks=in_blocks)
    monkeypatch.setattr(tilepy.jit, "compile", lambda func, fast: ck)
    kernel = SimpleNamespace(func=None)
    fn, views, call, one_call = L._compile(kernel, fast=True)
    assert fn is ck.fn and views is None and one_call is not in_blocks
    assert call is (L._blas_whole if whole and not in_blocks else blas.call_one_thread)
    assert L._compile(kernel, fast=False)[2] is None  # exact mode never calls BLAS
    ck.source = "C[i, j] = A[i, k] * B[k, j]"
    assert L._compile(kernel, fast=True)[2] is None


def test_whole_blas_launch_runs_blas_on_the_launch_paths_threads(fake_blas):
    fake_blas[0] = 1
    seen, fn = _seen(fake_blas)
    before = L._THREADS[0]
    try:
        L._THREADS[0] = 2
        L._blas_whole(fn, "x")
        L._THREADS[0] = 1
        L._blas_whole(fn, "y")
    finally:
        L._THREADS[0] = before
    assert seen == [(2, ("x",)), (1, ("y",))]
    assert fake_blas[0] == 1


def test_loading_blas_asks_its_idle_threads_to_sleep_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    blas.load_blas()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "4"
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "20")
    blas.load_blas()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "20"
