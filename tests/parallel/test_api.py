"""The communicator API on the local backend: point to point, the other collectives, split."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.parallel as tp
from tests.parallel.helpers import inputs, launch, same_bits
from tilepy.parallel import spec


def test_launch_returns_results_in_rank_order():
    assert launch(lambda c: (c.rank, c.size, c.backend), 3) == [
        (0, 3, "local"), (1, 3, "local"), (2, 3, "local")]
    assert tp.detect_backend() == "local"


def test_import_does_not_load_numba_or_mpi4py():
    code = ("import sys, tilepy, tilepy.parallel; "
            "print(any(m in sys.modules for m in ('numba', 'mpi4py')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_errors_are_tilepy_errors():
    assert issubclass(tp.CommError, tilepy.TilepyError)
    for e in (tp.CollectiveMismatchError, tp.CommTimeoutError, tp.CommArgumentError):
        assert issubclass(e, tp.CommError)


def test_send_recv_any_dtype_and_shape_in_order():
    data = [np.arange(6, dtype=np.float32).reshape(2, 3),
            np.arange(5).astype(ml_dtypes.bfloat16), np.array(7, np.int64)]

    def body(comm):
        if comm.rank == 0:
            for d in data:
                comm.send(d, 1, tag=5)
            buf = data[0].copy()
            req = comm.isend(buf, 1, tag=6)
            buf[:] = -1  # the message was taken at isend time
            req.wait()
            return comm.recv(1, tag=2)
        got = [comm.recv(0, tag=5) for _ in data]
        late = comm.irecv(0, tag=6)
        comm.send(np.array([42.0]), 0, tag=2)
        return got + [late.wait()]

    r0, r1 = launch(body, 2)
    assert same_bits(r0, np.array([42.0]))
    for got, want in zip(r1, data + [data[0]]):
        assert same_bits(got, want)


def test_sendrecv_ring_shift():
    res = launch(lambda c: c.sendrecv(np.array([c.rank]), (c.rank + 1) % c.size,
                                      (c.rank - 1) % c.size), 4)
    assert [int(r[0]) for r in res] == [3, 0, 1, 2]


@pytest.mark.parametrize("p", [1, 2, 5])
def test_bcast_from_every_root(p):
    def body(comm):
        out = []
        for root in range(p):
            x = np.full((2, 3), root * 10 + 1, np.float32) if comm.rank == root else None
            out.append(comm.bcast(x, root=root))
        return out

    for res in launch(body, p):
        for root, x in enumerate(res):
            assert same_bits(x, np.full((2, 3), root * 10 + 1, np.float32))


@pytest.mark.parametrize("p", [3, 4, 6])
def test_reduce_to_each_root_follows_binomial_order(p):
    xs = inputs(p, 9, np.float32, seed=p)

    def body(comm):
        return [comm.reduce(xs[comm.rank], "sum", root) for root in range(p)]

    res = launch(body, p)
    for root in range(p):
        rotated = xs[root:] + xs[:root]  # virtual rank v = (r - root) mod p
        assert same_bits(res[root][root], spec.binomial(rotated, "sum"))
        assert all(res[r][root] is None for r in range(p) if r != root)


def test_allgather_and_alltoall():
    p = 4

    def body(comm):
        g = comm.allgather(np.array([comm.rank, comm.rank * 2], np.int16))
        a = comm.alltoall(np.arange(p * 2, dtype=np.float64).reshape(p, 2) + 100 * comm.rank)
        v = comm.allgatherv(np.full(comm.rank, comm.rank, np.int32))
        return g, a, v

    for r, (g, a, v) in enumerate(launch(body, p)):
        assert g.tolist() == [[i, 2 * i] for i in range(p)]
        assert a.tolist() == [[100 * j + 2 * r, 100 * j + 2 * r + 1] for j in range(p)]
        assert v.tolist() == [1, 2, 2, 3, 3, 3]


def test_split_into_tensor_and_data_groups():
    def body(comm):
        tp_group = comm.split(comm.rank // 2, key=-comm.rank)  # reversed order inside
        dp_group = comm.split(comm.rank % 2)
        none = comm.split(None if comm.rank else 0)
        s = tp_group.allreduce(np.array([comm.rank], np.int64))
        d = dp_group.allgather(np.array([comm.rank], np.int64)).reshape(-1)
        return tp_group.rank, tp_group.size, int(s[0]), d.tolist(), none is None

    res = launch(body, 6)
    assert [r[0] for r in res] == [1, 0, 1, 0, 1, 0]
    assert [r[2] for r in res] == [1, 1, 5, 5, 9, 9]
    assert res[0][3] == [0, 2, 4] and res[5][3] == [1, 3, 5]
    assert [r[4] for r in res] == [False] + [True] * 5


def test_barrier_orders_side_effects():
    log = []

    def body(comm):
        log.append(("before", comm.rank))
        comm.barrier()
        log.append(("after", comm.rank))

    launch(body, 5)
    assert [k for k, _ in log[:5]] == ["before"] * 5


@pytest.mark.parametrize("bad", [
    lambda c: c.allreduce(np.ones(3), op="mean"),
    lambda c: c.allreduce(np.ones(3), algorithm="native"),
    lambda c: c.allreduce(np.ones(3), algorithm="butterfly"),
    lambda c: c.send(np.ones(3), 7),
    lambda c: c.alltoall(np.ones(3)),
])
def test_bad_arguments_raise_comm_argument_error(bad):
    with pytest.raises(tp.CommArgumentError):
        launch(bad, 2)
