"""The models' launch path's thread choice (models/kernels/launch.py): each launch signature
is timed on one thread and on Numba's pool, then keeps the faster; small launches stay on
one thread untimed. The clock and the thread setter are stand-ins, so the choice does not
depend on this machine's load or core count; the kernel itself runs on the JIT."""

from __future__ import annotations

import numpy as np
import pytest

import tilepy
from tilepy.models import kops
from tilepy.models.kernels import elementwise as E
from tilepy.models.kernels import launch as L

N = L.FLOOR + 1000  # above the floor, not a whole number of the kernel's blocks


class Clock:
    """launch._clock's stand-in: each timed launch (a pair of reads) lasts 1.0 on one
    thread and `pool` on the pool (read from the thread count the launch path set)."""

    def __init__(self, pool: float):
        self.pool, self.t, self.reads = pool, 0.0, 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.t += self.pool if L._THREADS[1] == 2 else 1.0
        return self.t


@pytest.fixture
def policy(monkeypatch):
    """Two threads as the launch path sees them; the counts it sets, in order."""
    import numba  # noqa: F401  (a JIT test: numba loads anyway)

    sets: list[int] = []
    monkeypatch.setattr(L, "_THREADS", [2, 1, None, sets.append])
    monkeypatch.setattr(L, "_CHOICES", {})
    monkeypatch.setattr(L, "MEASURE", True)
    return sets


def _add(n: int, rng) -> tuple:
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    k = kops.kernel(E.binary, dtype=np.dtype(np.float32))
    return k, (x, y, kops.code(E.BINARY["add"]), np.empty_like(x)), x + y


@pytest.mark.parametrize("pool, chosen", [(0.5, True), (0.95, False)])
def test_a_signature_keeps_the_thread_count_its_timed_trials_found_faster(
        policy, monkeypatch, pool, chosen):
    monkeypatch.setattr(L, "_clock", Clock(pool))
    k, args, want = _add(N, np.random.default_rng(0))
    with tilepy.backend("jit"):
        for i in range(2 * L.TRIALS + 3):
            args[3][:] = np.nan
            L.launch(k, *args)
            assert args[3].tobytes() == want.tobytes(), i  # the same bits on either count
    (trial,) = L._CHOICES.values()
    assert trial.big is chosen and trial.best == [1.0, pool]
    # untimed first launch on one thread, then pool / one alternating, then the choice
    assert policy[:2 * L.TRIALS] == [2, 1] * L.TRIALS
    assert policy[2 * L.TRIALS:] == ([2] if chosen else [])


def test_a_signature_times_both_counts_again_later_and_may_change_its_choice(
        policy, monkeypatch):
    clock = Clock(0.95)  # the pool no faster at first (a busy machine)
    monkeypatch.setattr(L, "_clock", clock)
    k, args, want = _add(N, np.random.default_rng(5))
    with tilepy.backend("jit"):
        for _ in range(2 * L.TRIALS + 1):
            L.launch(k, *args)
        (trial,) = L._CHOICES.values()
        assert trial.big is False and trial.next == 4 * L.TRIALS + 1
        clock.pool = 0.5  # the machine quietens
        reads = clock.reads
        for _ in range(trial.next - trial.n - 1):
            L.launch(k, *args)
        assert clock.reads == reads and trial.big is False  # untimed between checks
        L.launch(k, *args)
        L.launch(k, *args)
    assert args[3].tobytes() == want.tobytes()
    assert trial.best == [1.0, 0.5] and trial.big is True
    assert trial.next == 2 * (4 * L.TRIALS + 2) + 1


def test_small_launches_stay_on_one_thread_untimed(policy, monkeypatch):
    monkeypatch.setattr(L, "_clock", lambda: pytest.fail("a small launch was timed"))
    k, args, want = _add(L.FLOOR - 1, np.random.default_rng(1))
    with tilepy.backend("jit"):
        for _ in range(3):
            L.launch(k, *args)
    assert args[3].tobytes() == want.tobytes()
    assert L._CHOICES == {} and policy == []


def test_a_replayed_launch_finishes_its_trials_then_runs_on_the_choice(policy, monkeypatch):
    monkeypatch.setattr(L, "_clock", Clock(0.5))
    k, args, want = _add(N, np.random.default_rng(2))
    with tilepy.backend("jit"):
        call, big = L.bound(k, args)
    assert big is None  # the bound call sets its own thread count
    ops = [(call, big)]
    for _ in range(2 * L.TRIALS + 2):
        args[3][:] = 0
        L.replay(ops)
        assert args[3].tobytes() == want.tobytes()
    assert [t.big for t in L._CHOICES.values()] == [True]
    assert policy == [2, 1] * L.TRIALS + [2]


def test_set_grain_pins_a_kernel_to_the_pool_without_trials(policy, monkeypatch):
    monkeypatch.setattr(L, "_clock", lambda: pytest.fail("a pinned launch was timed"))
    monkeypatch.setattr(L, "_GRAINS", {})
    k, args, want = _add(N, np.random.default_rng(3))
    L.set_grain(k, N)
    with tilepy.backend("jit"):
        L.launch(k, *args)
    assert args[3].tobytes() == want.tobytes()
    assert policy == [2] and L._CHOICES == {}


@pytest.mark.exhaustive
def test_a_fast_whole_product_launch_is_measured_like_any_other(policy, monkeypatch):
    """Fast mode's whole-launch gemm runs BLAS on panels over Numba's threads, so its
    thread count is timed like any launch's (the stand-in clock makes the pool faster),
    and the product is right on either count (exhaustive: a fast compile)."""
    monkeypatch.setattr(L, "_clock", Clock(0.5))
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((160, 160)).astype(np.float32) for _ in range(2))
    with tilepy.backend("jit", fast=True):
        for _ in range(2 * L.TRIALS + 3):
            got = kops.matmul(a, b)
            assert np.allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    (trial,) = L._CHOICES.values()
    assert isinstance(trial, L._Trial) and trial.big and policy[-1] == 2


def test_a_one_block_launch_stays_on_one_thread_unmeasured(policy):
    """The grid is read from the IR at the launch's sizes (no compile needed here)."""
    f32 = np.dtype(np.float32)
    one = kops.kernel(E.binary, block=1 << 15, dtype=f32)  # one block covers N
    many = kops.kernel(E.binary, dtype=f32)
    _, arrays, _ = _add(N, np.random.default_rng(6))
    assert L._blocks(one.func, [N]) == 1 and L._blocks(many.func, [N]) == -(-N // 1024)
    assert L._mode(one, False, arrays, [N]) is False
    assert isinstance(L._mode(many, False, arrays, [N]), L._Trial)
    assert list(L._CHOICES.values())[0] is False
