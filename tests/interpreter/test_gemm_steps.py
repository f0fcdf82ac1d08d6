"""The gemm's fast k loop (products of many steps at once, then an ordered reduce) against
a plain per-step loop written here from the contract, bit for bit: signed zeros, inf, NaN,
subnormal and overflowing products, sums whose value depends on the order, 1-wide tiles,
several block groups and k chunks, edge tiles and transposes through the interpreter, on
one thread and shared with the worker thread."""

import threading

import numpy as np
import pytest

from tests.interpreter import kernels as K
from tests.interpreter.oracle import same, seq_gemm
from tilepy.interpreter import accumulate, run
from tilepy.ir.types import dtype as ir_dtype

_ONE_CPU = ("this machine has one CPU: the interpreter never starts its worker thread "
            "there, so no two-thread run exists to compare (the forced-worker case runs)")


def _steps_by_hand(at, bt, c0):
    """c = c + a[k] * b[k], k ascending, each op rounded to c's dtype (numpy's own ops)."""
    c = c0.copy()
    with np.errstate(all="ignore"):
        for k in range(at.shape[1]):
            c = c + at[:, k, :, None] * bt[:, k, None, :]
    return c


def _nasty(rng, shape, dtype):
    """Values whose products and sums hit IEEE corners: signed zeros, subnormals, products
    that underflow or overflow, big/small mixes whose sum depends on the order of the adds,
    and inf/NaN rare enough (0.5% of the values) that most sums of ~100 products stay
    finite, so their bits are compared too."""
    fi = np.finfo(dtype)
    tiny, big = float(fi.smallest_normal), float(fi.max)
    common = np.array([0.0, -0.0, tiny / 4, -tiny / 2, tiny * 8, 1e8, -1e8, 1.0, -1.0, 0.5,
                       3.0], dtype)
    rare = np.array([np.inf, -np.inf, np.nan, big / 2, -big / 3], dtype)
    x = rng.standard_normal(shape).astype(dtype)
    pick = rng.random(shape)
    x = np.where(pick < 0.4, rng.choice(common, shape), x)
    return np.where(pick > 0.995, rng.choice(rare, shape), x).astype(dtype)


def _mostly_finite(x) -> bool:
    """Whether the finite values the test compares are most of the output."""
    return np.isfinite(x).mean() > 0.5


def _bits_equal(a, b):
    """Same bits, except that any NaN matches any NaN; the sign of zeros counts."""
    return same(a, b) and np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0]))


SHAPES = [  # blocks, K, M, N
    (3, 40, 1, 7),     # 1-row tiles: the reduce's inner axis is N
    (2, 33, 9, 1),     # 1-column tiles: inner axis is M
    (1, 19, 1, 1),     # 1x1: the per-step path (k would be innermost)
    (3, 20, 128, 128),  # one block's k steps split over several product blocks
    (70, 16, 8, 8),    # many blocks per product block
    (5, 32, 64, 64),   # the benchmark's tiles: float32 groups 2 blocks, the last alone
    (1, 1, 4, 4),
]


@pytest.mark.parametrize("nb,k,m,n", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("start", ["zeros", "values", "with -0"])
def test_k_loop_gives_the_per_step_sums(nb, k, m, n, dtype, start):
    rng = np.random.default_rng(nb * 1000 + k * 10 + m + n)
    at, bt = _nasty(rng, (nb, k, m), dtype), _nasty(rng, (nb, k, n), dtype)
    c0 = {"zeros": np.zeros((nb, m, n), dtype),
          "values": np.abs(_nasty(rng, (nb, m, n), dtype)) + 0.0,  # no -0: the fast form
          "with -0": _nasty(rng, (nb, m, n), dtype)}[start]
    if start == "with -0":  # element (0, 0) of each block: -0 + -0 + ... stays -0
        at[:, :, 0], bt[:, :, 0], c0[:, 0, 0] = 1.5, -0.0, -0.0
    want = _steps_by_hand(at, bt, c0)
    assert _mostly_finite(want)
    got = c0.copy()
    accumulate._gemm_steps(at, bt, got, ir_dtype(np.dtype(dtype).name))
    assert _bits_equal(got, want)


def test_order_of_the_adds_is_k_ascending():
    """A sum that pairwise or reordered addition gets wrong: 1e8 + 1 - 1e8 + 1 + ... """
    k = 24
    at = np.ones((2, k, 3), np.float32)
    seq = np.array([1e8, 1.0, -1e8] + [1.0] * (k - 3), np.float32)
    bt = np.broadcast_to(seq[None, :, None], (2, k, 5)).copy()
    c = np.zeros((2, 3, 5), np.float32)
    accumulate._gemm_steps(at, bt, c, ir_dtype("float32"))
    assert np.all(c == np.float32(k - 3))  # 1e8 + 1 rounds to 1e8: the first 1 is lost
    assert np.float32(np.sum(seq)) != np.float32(k - 3)  # numpy's pairwise sum differs


def test_edge_tiles_with_specials_through_the_interpreter():
    rng = np.random.default_rng(5)
    M, N, Kd = 70, 45, 90  # edge tiles in every dimension (tiles 32 x 16 x 16)
    a = _nasty(rng, (M, Kd), np.float32)
    b = _nasty(rng, (Kd, N), np.float32)
    c0 = np.abs(_nasty(rng, (M, N), np.float32)) + 0.0
    c = c0.copy()
    run(K.gemm(M, N, Kd, 32, 16, 16, "float32", "float32").func, dict(A=a, B=b, C=c), {})
    with np.errstate(all="ignore"):
        want = seq_gemm(a, b, c0, "float32", k_pad=96)
    assert _mostly_finite(want) and _bits_equal(c, want)


# ---------------------------------------------------------------- the worker thread


class _CountingPool:
    """Stands in for the worker pool: runs each job at once and counts them."""

    def __init__(self):
        self.jobs = 0

    def submit(self, fn, *args):
        from concurrent.futures import Future

        self.jobs += 1
        f = Future()
        f.set_result(fn(*args))
        return f


def _threads_take_turns(monkeypatch) -> list:
    """In each threaded T.gemm, the worker thread takes the first group, then the calling
    thread the second, then both go on as they like: both surely compute some groups.
    Returns how many groups the worker took in each call."""
    taken, orig, turns = [], accumulate._product_groups, {}

    def groups(at, bt, c, groups, ks, take):
        worker_took, caller_took = turns.setdefault(take, (threading.Event(),
                                                           threading.Event()))
        mine, theirs = ((caller_took, worker_took)
                        if threading.current_thread() is threading.main_thread()
                        else (worker_took, caller_took))
        if mine is caller_took:
            assert theirs.wait(10), "the worker thread took no group"
        n = [0]

        def take_in_turn():
            i = take()
            n[0] += i < len(groups)
            if not mine.is_set():
                mine.set()
                if mine is worker_took:
                    assert theirs.wait(10), "the calling thread took no group"
            return i

        orig(at, bt, c, groups, ks, take_in_turn)
        if mine is worker_took:
            taken.append(n[0])

    monkeypatch.setattr(accumulate, "_product_groups", groups)
    return taken


@pytest.mark.parametrize("nb,k,m,n", [s for s in SHAPES if s[0] >= 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", ["threads", "worker takes all"])
def test_threaded_k_loop_gives_the_single_thread_bits(monkeypatch, nb, k, m, n, dtype, pool):
    """Block groups shared between this thread and the worker, or all taken by the
    worker: the same bits as one thread, with -0/inf/NaN/subnormal/overflowing products."""
    rng = np.random.default_rng(nb + k + m + n)
    at, bt = _nasty(rng, (nb, k, m), dtype), _nasty(rng, (nb, k, n), dtype)
    c0 = np.abs(_nasty(rng, (nb, m, n), dtype)) + 0.0
    dt = ir_dtype(np.dtype(dtype).name)
    monkeypatch.setenv("TILEPY_INTERP_THREADS", "1")
    one = c0.copy()
    accumulate._gemm_steps(at, bt, one, dt)
    monkeypatch.delenv("TILEPY_INTERP_THREADS")
    monkeypatch.setattr(accumulate, "_THREAD_MIN", 0)  # thread even this small problem
    monkeypatch.setattr(accumulate, "_PRODUCT_BYTES",  # groups of 1 block x 4 steps
                        m * n * 4 * np.dtype(dtype).itemsize)
    monkeypatch.setattr(accumulate, "_idle_core", lambda: True)  # however busy the machine
    if pool == "worker takes all":
        counting = _CountingPool()  # runs the worker's job first: it takes every group
        monkeypatch.setattr(accumulate, "_pool", lambda: counting)
    elif accumulate._pool() is None:
        pytest.skip(_ONE_CPU)
    else:
        taken = _threads_take_turns(monkeypatch)
    two = c0.copy()
    accumulate._gemm_steps(at, bt, two, dt)
    want = _steps_by_hand(at, bt, c0)
    assert _mostly_finite(want) and _bits_equal(one, want) and _bits_equal(two, want)
    if pool == "threads":  # both threads computed groups (one block each, nb in all)
        assert len(taken) == 1 and 1 <= taken[0] < nb
    else:
        assert counting.jobs == 1


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("start", ["values", "with -0"])
def test_benchmark_tiles_through_the_interpreter_on_every_path(monkeypatch, ta, tb, start):
    """The benchmark's 64x64x32 tiles on a 136x150x100 problem (edge tiles in M, N and K;
    9 blocks, so product blocks of 2 blocks and a last one alone), transposed operands and
    IEEE corners: one thread, the worker taking every group, and two real threads give
    the contract's sums bit for bit."""
    rng = np.random.default_rng(17 + 2 * ta + tb)
    M, N, Kd = 136, 150, 100
    a, b = _nasty(rng, (M, Kd), np.float32), _nasty(rng, (Kd, N), np.float32)
    c0 = np.abs(_nasty(rng, (M, N), np.float32)) + 0.0
    if start == "with -0":  # a -0 in C: the whole batch takes the per-step path
        a[0, :], b[:, 0], c0[0, 0] = 1.5, -0.0, -0.0
    with np.errstate(all="ignore"):
        want = seq_gemm(a, b, c0, "float32", k_pad=128)
    assert _mostly_finite(want)
    kernel = K.gemm(M, N, Kd, 64, 64, 32, "float32", "float32", ta, tb)
    args = dict(A=a.T.copy() if ta else a, B=b.T.copy() if tb else b)
    real_pool, counting = accumulate._pool, _CountingPool()
    monkeypatch.setattr(accumulate, "_THREAD_MIN", 0)
    monkeypatch.setattr(accumulate, "_idle_core", lambda: True)  # however busy the machine
    for path in ("one thread", "worker takes all", "two threads"):
        monkeypatch.setenv("TILEPY_INTERP_THREADS", "1" if path == "one thread" else "")
        monkeypatch.setattr(accumulate, "_pool",
                            (lambda: counting) if path == "worker takes all" else real_pool)
        if path == "two threads":
            if real_pool() is None:
                pytest.skip(_ONE_CPU)
            taken = _threads_take_turns(monkeypatch)
        c = c0.copy()
        run(kernel.func, dict(args, C=c), {})
        assert _bits_equal(c, want), path
    # T.gemm runs 4 times (K = 100 in steps of 32): each on the product path shares its 5
    # groups with the worker; with a -0 in C the batch takes the per-step path instead
    calls = 4 if start == "values" else 0
    assert counting.jobs == calls and len(taken) == calls
    assert all(1 <= t < 5 for t in taken)


def test_no_worker_for_small_problems_busy_cpus_or_when_switched_off(monkeypatch):
    pool = _CountingPool()
    monkeypatch.setattr(accumulate, "_pool", lambda: pool)
    idle = [True]
    monkeypatch.setattr(accumulate, "_idle_core", lambda: idle[0])
    rng = np.random.default_rng(2)
    at, bt = rng.standard_normal((8, 32, 64)), rng.standard_normal((8, 32, 64))
    c = np.zeros((8, 64, 64))
    accumulate._gemm_steps(at, bt, c, ir_dtype("float64"))  # 2^20 products: one thread
    assert pool.jobs == 0
    monkeypatch.setattr(accumulate, "_THREAD_MIN", 1 << 20)
    accumulate._gemm_steps(at, bt, c, ir_dtype("float64"))
    assert pool.jobs == 1
    idle[0] = False  # every CPU busy: this thread alone
    accumulate._gemm_steps(at, bt, c, ir_dtype("float64"))
    assert pool.jobs == 1
    monkeypatch.undo()
    monkeypatch.setenv("TILEPY_INTERP_THREADS", "1")
    assert accumulate._pool() is None
    assert isinstance(accumulate._idle_core(), bool)
