"""Thread phases that store into a shared tile through a flattened per-thread index (`s[e //
K, e % K]`, `e = i * c * n + t * c + v`, as TileLang's dequantize kernels do) run as one
vector step on the interpreter with the thread-by-thread bits; phases where two threads may
meet at an element stay serial."""

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.frontend import phases
from tilepy.interpreter import run
from tilepy.ir.printer import format_func

N = 32  # threads


def flattened(step=N * 8, cols=64, mod=64, rows=32):
    """Thread t updates S[e // cols, e % mod] for e = i * step + t * 8 + v (a value that
    depends on the order of the updates when two threads meet at an element)."""

    @T.prim_func
    def main(X: T.Tensor((16, 64), "float32"), Y: T.Tensor((rows, 64), "float32")):
        with T.Kernel(1, threads=N) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((rows, 64), "float32")
            for i, j in T.Parallel(rows, 64):
                S[i, j] = 0.0
            T.sync_threads()
            for i in T.serial(4):  # one phase: the i loop inside each thread
                for v in T.vectorized(8):
                    e = i * step + tx * 8 + v
                    S[e // cols, e % mod] = S[e // cols, e % mod] * 3.0 + X[e // 64, e % 64] + tx
            T.sync_threads()
            for i, j in T.Parallel(rows, 64):
                Y[i, j] = S[i, j]

    return main


def _run(func, x, serial, monkeypatch):
    with monkeypatch.context() as m:
        if serial:  # every thread phase one thread after another
            m.setattr(phases, "parallel_body", lambda *a, **k: None)
        f = func().func if callable(func) else func
    y = np.full((32, 64), np.nan, np.float32)
    run(f, {"X": x, "Y": y}, {})
    return y, format_func(f)


@pytest.mark.parametrize("args", [{}, {"cols": 32, "mod": 32}], ids=["64", "32"])
def test_div_mod_of_a_per_thread_index_runs_as_a_vector_step_with_the_serial_bits(
        args, monkeypatch):
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    vec, text = _run(lambda: flattened(**args), x, False, monkeypatch)
    ser, serial_text = _run(lambda: flattened(**args), x, True, monkeypatch)
    assert f"for t in T.Parallel({N})" in text and f"T.serial({N})" not in text
    assert text.index(f"for t in T.Parallel({N})") < text.index("T.serial(4)")
    assert f"for t in T.serial({N})" in serial_text
    assert not np.isnan(vec).any()
    assert vec.view(np.uint32).tolist() == ser.view(np.uint32).tolist()


@pytest.mark.parametrize("args", [
    {"step": 128},   # i's step is no multiple of 8 * N: thread 16 at i = 0 meets 0 at i = 1
    {"step": 4},     # i's terms and v's overrun one thread's 8 elements
    {"mod": 32},     # e // 64 with e % 32: e and e + 32 meet (threads 0 and 4)
], ids=["upper", "lower", "mod"])
def test_phases_where_threads_may_meet_stay_serial_with_thread_order(args, monkeypatch):
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    got, text = _run(lambda: flattened(**args), x, False, monkeypatch)
    ser, _ = _run(lambda: flattened(**args), x, True, monkeypatch)
    assert f"for t in T.serial({N})" in text
    assert text.index(f"for t in T.serial({N})") < text.index("T.serial(4)")
    assert got.view(np.uint32).tolist() == ser.view(np.uint32).tolist()



def flat(step):
    """The same updates at one index position: S[i * step + t * 8 + v]."""

    @T.prim_func
    def main(X: T.Tensor((32, 64), "float32"), Y: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=N) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((2048,), "float32")
            for i in T.Parallel(2048):
                S[i] = 0.0
            T.sync_threads()
            for i in T.serial(4):
                for v in T.vectorized(8):
                    e = i * step + tx * 8 + v
                    S[e] = S[e] * 3.0 + X[e // 64, e % 64] + tx
            T.sync_threads()
            for i, j in T.Parallel(32, 64):
                Y[i, j] = S[i * 64 + j]

    return main


@pytest.mark.parametrize("step, vector", [(N * 8, True), (N * 16, True), (128, False)])
def test_loop_steps_in_multiples_of_c_times_threads_keep_one_position_disjoint(
        step, vector, monkeypatch):
    x = np.random.default_rng(4).standard_normal((32, 64)).astype(np.float32)
    got, text = _run(lambda: flat(step), x, False, monkeypatch)
    ser, _ = _run(lambda: flat(step), x, True, monkeypatch)
    assert (f"for t in T.Parallel({N})" in text) is vector
    assert got.view(np.uint32).tolist() == ser.view(np.uint32).tolist()

def test_an_index_range_past_int32_stays_serial():
    @T.prim_func
    def wide(Y: T.Tensor((1 << 21, 1 << 12), "float32")):
        with T.Kernel(1, threads=N) as _:
            tx = T.get_thread_binding()
            for i in T.serial(1 << 12):  # e reaches 2^32: int32 addresses could wrap
                for v in T.vectorized(8):
                    e = i * (N * 8 * 4096) + tx * 8 + v
                    Y[e // 4096, e % 4096] = 1.0

    assert f"for t in T.serial({N})" in format_func(wide.func)



def scaled():
    """The MXFP programs' shape: a per-thread T.Parallel scales the thread's own values
    between the gathered load and the flattened store."""

    @T.prim_func
    def main(X: T.Tensor((16, 64), "float32"), Y: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=N) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((16, 64), "float32")
            loc = T.alloc_local((8,), "float32")
            for i in T.serial(4):
                for v in T.vectorized(8):
                    e = i * N * 8 + tx * 8 + v
                    loc[v] = X[e // 64, e % 64] + tx
                for v in T.Parallel(8):
                    loc[v] = loc[v] * 1.5 + v
                for v in T.vectorized(8):
                    e = i * N * 8 + tx * 8 + v
                    S[e // 64, e % 64] = loc[v]
            T.sync_threads()
            for i, j in T.Parallel(16, 64):
                Y[i, j] = S[i, j]

    return main


def test_a_per_thread_parallel_loop_over_own_storage_keeps_the_phase_a_vector_step(
        monkeypatch):
    x = np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)
    vec, text = _run(scaled, x, False, monkeypatch)
    ser, _ = _run(scaled, x, True, monkeypatch)
    assert f"for t in T.Parallel({N})" in text and "T.Parallel(8)" in text
    e = np.arange(1024)
    f32 = np.float32
    want = (x.reshape(-1) + ((e % 256) // 8).astype(f32)) * f32(1.5) + (e % 8).astype(f32)
    assert vec.reshape(-1)[:1024].view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert vec.view(np.uint32).tolist() == ser.view(np.uint32).tolist()


def test_the_jit_gives_the_vector_steps_bits():
    k = scaled()
    x = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)
    got = {}
    for backend in ("interp", "jit"):
        y = np.full((32, 64), np.nan, np.float32)
        with tilepy.backend(backend):
            k(x, y)
        got[backend] = y.view(np.uint32).tolist()
    assert f"for t in T.Parallel({N})" in format_func(k.func)
    assert got["interp"] == got["jit"]
