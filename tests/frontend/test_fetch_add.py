"""Thread phases that take slots with `T.atomic_add(..., return_prev=True)` run as one
vector step on the interpreter (a lane-ordered `T.fetch_add`), with the bits of the thread
by thread execution: several counters, conditional takes, several buffers, a per-thread
variable holding the slot, one counter taken in two exclusive branches, float counters."""

import numpy as np
import pytest

import tilepy.language as T
from tilepy import jit
from tilepy.errors import KernelRuntimeError
from tilepy.frontend import phases
from tilepy.interpreter import run
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_func

N, NB = 64, 4


def buckets(n=N, nb=NB):
    """Values >= 0 go to bucket v % nb of Out (ranges of n slots each, from counters), the
    others to Neg through one counter; even buckets of values > 50 also to Big (a per-thread
    slot, kept below a limit); bucket 0 takes its slot in two exclusive branches."""

    @T.prim_func
    def main(X: T.Tensor((2, n), "int32"), Out: T.Tensor((2, nb * n), "int32"),
             Neg: T.Tensor((2, n), "int32"), Big: T.Tensor((2, 8), "int32")):
        with T.Kernel(2, threads=n) as bx:
            tx = T.get_thread_binding()
            cnt = T.alloc_shared((nb,), "int32")
            nneg = T.alloc_shared((2,), "int32")
            l_big = T.alloc_var("int32")
            if tx < nb:
                cnt[tx] = tx * n
            if tx == 0:
                nneg[0] = 0
                nneg[1] = 0
            T.sync_threads()
            v = X[bx, tx]
            b = v % nb
            if v >= 0 and b > 0:
                pos = T.atomic_add(cnt[b], 1, return_prev=True)
                Out[bx, pos] = v * 100 + tx
            elif v >= 0:
                if v > 50:
                    l_big = T.atomic_add(cnt[b], 1, return_prev=True)  # bucket 0: from 0
                    if l_big < 8:
                        Big[bx, l_big] = tx
                else:
                    pos = T.atomic_add(cnt[b], 1, return_prev=True)
                    Out[bx, pos] = v * 100 + tx
            else:
                pos = T.atomic_add(nneg[bx % 2], 1, return_prev=True)
                Neg[bx, pos] = tx
    return main


def float_counter(n=N):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Old: T.Tensor((n,), "float32"),
             Tot: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=n) as _:
            tx = T.get_thread_binding()
            acc = T.alloc_shared((2,), "float32")
            if tx == 0:
                acc[0] = 0.0
                acc[1] = 0.0
            T.sync_threads()
            o = T.atomic_add(acc[tx % 2], X[tx], return_prev=True)
            Old[tx] = o
            T.sync_threads()
            if tx < 2:
                Tot[tx] = acc[tx]
    return main


def _run(factory, arrays, serial, monkeypatch):
    with monkeypatch.context() as m:
        if serial:  # every thread phase one thread after another
            m.setattr(phases, "parallel_body", lambda *a, **k: None)
        k = factory()
        func = k.func
    text = format_func(func)
    assert parse(text) == func  # the printed IR reads back (T.fetch_add included)
    out = {name: a.copy() for name, a in arrays.items()}
    run(func, out, {})
    return out, text


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-40, 100, size=(2, N), dtype=np.int32)
    return dict(X=x, Out=np.full((2, NB * N), -1, np.int32), Neg=np.full((2, N), -1, np.int32),
                Big=np.full((2, 8), -1, np.int32))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slot_taking_phases_run_as_vector_steps_with_the_serial_bits(seed, monkeypatch):
    arrays = _inputs(seed)
    vec, text = _run(buckets, arrays, False, monkeypatch)
    ser, serial_text = _run(buckets, arrays, True, monkeypatch)
    assert "T.fetch_add(" in text and "distinct=True" in text
    assert "T.fetch_add(" not in serial_text
    for name in arrays:
        assert vec[name].tobytes() == ser[name].tobytes(), name
    # the values, by a model of the threads in order
    x = arrays["X"]
    for bx in range(2):
        cnt, nneg, out = [b * N for b in range(NB)], 0, {}
        for tx in range(N):
            v = int(x[bx, tx])
            if v < 0:
                assert vec["Neg"][bx, nneg] == tx
                nneg += 1
                continue
            b = v % NB
            if b == 0 and v > 50:
                if cnt[0] < 8:
                    assert vec["Big"][bx, cnt[0]] == tx
            else:
                out[cnt[b]] = v * 100 + tx
            cnt[b] += 1
        for p, want in out.items():
            assert vec["Out"][bx, p] == want


def test_the_jit_runs_the_same_phase_with_the_same_bits(monkeypatch):
    arrays = _inputs(3)
    vec, _ = _run(buckets, arrays, False, monkeypatch)
    out = {name: a.copy() for name, a in arrays.items()}
    jit.run(buckets().func, out, {})
    for name in arrays:
        assert out[name].tobytes() == vec[name].tobytes(), name


def test_float_counters_add_in_thread_order_one_rounding_each(monkeypatch):
    x = (np.random.default_rng(4).standard_normal(N) * 1e3).astype(np.float32)
    arrays = dict(X=x, Old=np.zeros(N, np.float32), Tot=np.zeros(2, np.float32))
    vec, text = _run(float_counter, arrays, False, monkeypatch)
    ser, _ = _run(float_counter, arrays, True, monkeypatch)
    assert "T.fetch_add(" in text
    assert vec["Old"].tobytes() == ser["Old"].tobytes()
    assert vec["Tot"].tobytes() == ser["Tot"].tobytes()
    acc = [np.float32(0), np.float32(0)]
    for t in range(N):
        assert vec["Old"][t] == acc[t % 2]
        acc[t % 2] = np.float32(acc[t % 2] + x[t])
    assert vec["Tot"].tolist() == [float(a) for a in acc]


def overlapping(n=16):
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Out: T.Tensor((2 * n,), "int32")):
        with T.Kernel(1, threads=n) as _:
            tx = T.get_thread_binding()
            cnt = T.alloc_shared((2,), "int32")
            if tx < 2:
                cnt[tx] = 0  # planted: both counters start at slot 0
            T.sync_threads()
            pos = T.atomic_add(cnt[X[tx] % 2], 1, return_prev=True)
            Out[pos] = tx
    return main


def test_two_threads_taking_one_slot_are_an_error_naming_the_counter(monkeypatch):
    x = np.arange(16, dtype=np.int32)
    with pytest.raises(KernelRuntimeError) as info:
        _run(overlapping, dict(X=x, Out=np.zeros(32, np.int32)), False, monkeypatch)
    msg = str(info.value)
    assert "block 0" in msg and "took the value 0 from cnt" in msg
    assert "planted" not in msg and info.value.loc.line > 0
    # run thread by thread, the later thread's store stays
    ser, _ = _run(overlapping, dict(X=x, Out=np.zeros(32, np.int32)), True, monkeypatch)
    assert ser["Out"][:8].tolist() == [2 * k + 1 for k in range(8)]


def shifted_slots(n=16):
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Out: T.Tensor((2 * n,), "int32")):
        with T.Kernel(1, threads=n) as _:
            tx = T.get_thread_binding()
            cnt = T.alloc_shared((2,), "int32")
            if tx < 2:
                cnt[tx] = tx * n
            T.sync_threads()
            b = X[tx] % 2
            pos = T.atomic_add(cnt[b], 1, return_prev=True) - b * 3  # a thread's own shift
            Out[pos] = tx
    return main


def test_a_slot_shifted_by_a_thread_dependent_term_keeps_the_phase_serial(monkeypatch):
    # distinct slots no longer mean distinct elements: thread order must decide
    x = np.arange(16, dtype=np.int32)
    arrays = dict(X=x, Out=np.full(32, -1, np.int32))
    vec, text = _run(shifted_slots, arrays, False, monkeypatch)
    ser, _ = _run(shifted_slots, arrays, True, monkeypatch)
    assert "T.fetch_add(" not in text
    assert vec["Out"].tobytes() == ser["Out"].tobytes()
    assert vec["Out"][13:16].tolist() == [1, 3, 5]
