"""The gemm's fast k loop (products of many steps at once, then an ordered reduce) against
a plain per-step loop written here from the contract, bit for bit: signed zeros, inf, NaN,
subnormal and overflowing products, sums whose value depends on the order, 1-wide tiles,
several block groups and k chunks, and edge tiles through the interpreter."""

import numpy as np
import pytest

from tests.interpreter import kernels as K
from tests.interpreter.oracle import same, seq_gemm
from tilepy.interpreter import accumulate, run
from tilepy.ir.types import dtype as ir_dtype


def _steps_by_hand(at, bt, c0):
    """c = c + a[k] * b[k], k ascending, each op rounded to c's dtype (numpy's own ops)."""
    c = c0.copy()
    with np.errstate(all="ignore"):
        for k in range(at.shape[1]):
            c = c + at[:, k, :, None] * bt[:, k, None, :]
    return c


def _nasty(rng, shape, dtype):
    """Values whose products and sums hit every IEEE corner, and big/small mixes whose
    sum depends on the order of the adds."""
    pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 1e-30, 3e38, -2e38,
                     1e8, -1e8, 1.0, -1.0, 0.5, 3.0], dtype)
    x = rng.standard_normal(shape).astype(dtype)
    pick = rng.random(shape)
    return np.where(pick < 0.4, rng.choice(pool, shape), x).astype(dtype)


def _bits_equal(a, b):
    """Same bits, except that any NaN matches any NaN; the sign of zeros counts."""
    return same(a, b) and np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0]))


SHAPES = [  # blocks, K, M, N
    (3, 40, 1, 7),     # 1-row tiles: the reduce's inner axis is N
    (2, 33, 9, 1),     # 1-column tiles: inner axis is M
    (1, 19, 1, 1),     # 1x1: the per-step path (k would be innermost)
    (3, 20, 128, 128),  # one block's k steps split over several product blocks
    (70, 16, 8, 8),    # many blocks per product block
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
    assert _bits_equal(c, want)


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


@pytest.mark.parametrize("nb,k,m,n", [s for s in SHAPES if s[0] >= 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", ["threads", "worker takes all"])
def test_threaded_k_loop_gives_the_single_thread_bits(monkeypatch, nb, k, m, n, dtype, pool):
    """Block groups shared between this thread (einsum) and the worker (np.multiply), or
    all taken by the worker: the same bits as one thread, with -0/inf/NaN/subnormal/
    overflowing products."""
    rng = np.random.default_rng(nb + k + m + n)
    at, bt = _nasty(rng, (nb, k, m), dtype), _nasty(rng, (nb, k, n), dtype)
    c0 = np.abs(_nasty(rng, (nb, m, n), dtype)) + 0.0
    dt = ir_dtype(np.dtype(dtype).name)
    monkeypatch.setenv("TILEPY_INTERP_THREADS", "1")
    one = c0.copy()
    accumulate._gemm_steps(at, bt, one, dt)
    monkeypatch.delenv("TILEPY_INTERP_THREADS")
    monkeypatch.setattr(accumulate, "_THREAD_MIN", 0)  # thread even this small problem
    monkeypatch.setattr(accumulate, "_PRODUCTS", m * n * 4)  # groups of 1 block x 4 steps
    monkeypatch.setattr(accumulate, "_idle_core", lambda: True)  # however busy the machine
    if pool == "worker takes all":
        counting = _CountingPool()  # runs the worker's job first: it takes every group
        monkeypatch.setattr(accumulate, "_pool", lambda: counting)
    elif accumulate._pool() is None:
        pytest.skip("one CPU: no worker thread")
    two = c0.copy()
    accumulate._gemm_steps(at, bt, two, dt)
    assert _bits_equal(two, one) and _bits_equal(one, _steps_by_hand(at, bt, c0))
    assert pool == "threads" or counting.jobs == 1


def test_threaded_edge_tiles_through_the_interpreter(monkeypatch):
    rng = np.random.default_rng(9)
    M, N, Kd = 70, 45, 90
    a, b = _nasty(rng, (M, Kd), np.float32), _nasty(rng, (Kd, N), np.float32)
    outs = []
    for threads in ("1", ""):
        monkeypatch.setenv("TILEPY_INTERP_THREADS", threads)
        monkeypatch.setattr(accumulate, "_THREAD_MIN", 0)
        monkeypatch.setattr(accumulate, "_idle_core", lambda: True)
        c = np.zeros((M, N), np.float32)
        run(K.gemm(M, N, Kd, 32, 16, 16, "float32", "float32").func, dict(A=a, B=b, C=c), {})
        outs.append(c)
    assert _bits_equal(outs[0], outs[1])


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
