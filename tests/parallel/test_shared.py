"""The local backend's shared-memory allreduce: the same bits as the message-passing
algorithms and their spec, one read-only result shared by all ranks, `out=` copies."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilepy.parallel as tp
from tests.parallel.helpers import PS, inputs, launch, same_bits
from tilepy.parallel import plans, spec

DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16, np.int32]
ALGS = list(tp.ALGORITHMS)


def both_paths(xs, op="sum", group_size=2):
    """{algorithm: (shared results per rank, message results per rank)}."""
    def body(comm):
        got = {}
        for shared in (True, False):
            comm.shared_memory = shared
            got[shared] = {a: comm.allreduce(xs[comm.rank], op, a, group_size=group_size)
                           for a in ALGS}
        return got

    res = launch(body, len(xs))
    return {a: ([r[True][a] for r in res], [r[False][a] for r in res]) for a in ALGS}


def int_inputs(p, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
            for _ in range(p)]


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 3 elements, so small inputs cross many block and chunk boundaries."""
    monkeypatch.setattr(plans, "BLOCK_BYTES", 3 * 8)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("p", PS)
def test_shared_path_gives_the_message_paths_bits(p, dtype, small_blocks):
    n = 5 * p + 3  # not divisible by p (nor by the block) for p > 1
    xs = int_inputs(p, n, p) if dtype == np.int32 else inputs(p, n, dtype, seed=p)
    for a, (shared, messages) in both_paths(xs).items():
        want = spec.expected(xs, a, group_size=2)
        for r in range(p):
            assert same_bits(shared[r], want), (a, p, r)
            assert same_bits(messages[r], want), (a, p, r)


@pytest.mark.parametrize("group_size", [1, 3])
@pytest.mark.parametrize("op", ["max", "prod"])
def test_other_ops_and_group_sizes(op, group_size):
    xs = inputs(7, 40, np.float32, seed=5, scale=1.0)
    for a, (shared, messages) in both_paths(xs, op, group_size).items():
        assert all(same_bits(s, m) for s, m in zip(shared, messages)), a
        assert same_bits(shared[0], spec.expected(xs, a, op, group_size)), a


def test_large_input_spans_default_blocks():
    p, n = 3, (plans.BLOCK_BYTES // 4) * 2 + 7  # three blocks of float32 per segment
    xs = inputs(p, n, np.float32, seed=11)
    for a, (shared, messages) in both_paths(xs).items():
        assert same_bits(shared[1], messages[1]) and same_bits(shared[2], spec.expected(xs, a))


def test_plans_restate_the_spec_orders():
    assert plans.plan("ring", 10, 4) == [(0, 3, (((1, 2), 3), 0)), (3, 6, (((2, 3), 0), 1)),
                                         (6, 8, (((3, 0), 1), 2)), (8, 10, (((0, 1), 2), 3))]
    assert plans.plan("recursive_doubling", 4, 5) == [(0, 4, (((0, 1), 2), (3, 4)))]
    assert plans.plan("tree", 4, 5) == [(0, 4, (((0, 1), (2, 3)), 4))]
    assert plans.plan("mpich_ring", 5, 4) == [(0, 2, (((1, 2), 3), 0)),
                                              (2, 4, (((2, 3), 0), 1)), (4, 5, (((3, 0), 1), 2))]
    assert plans.plan("hierarchical", 3, 4, 2) == [(0, 2, ((2, 3), (0, 1))),
                                                   (2, 3, ((0, 1), (2, 3)))]
    assert plans.plan("ring", 0, 3) == [] and plans.plan("tree", 5, 1) == [(0, 5, 0)]
    steps, rows = plans.compile_tree((((0, 1), (2, 3)), 4))
    assert steps == [(0, 1, -1), (2, 3, -2), (-1, -2, -1), (-1, 4, -1)] and rows == 1


def test_one_rank_and_empty_inputs():
    x = inputs(1, 9, ml_dtypes.bfloat16, seed=1)[0]
    for a in ALGS:
        got = launch(lambda c, a=a: c.allreduce(x, algorithm=a), 1)[0]
        assert same_bits(got, x) and not np.shares_memory(got, x)
    empty = launch(lambda c: c.allreduce(np.zeros((0, 3), np.float32)), 3)
    assert all(e.shape == (0, 3) and e.dtype == np.float32 for e in empty)


def test_result_is_one_read_only_array_shared_by_all_ranks():
    xs = inputs(4, 10, np.float64, seed=2)

    def body(comm):
        res = comm.allreduce(xs[comm.rank].reshape(2, 5), algorithm="tree")
        errors = []
        for write in (lambda: res.__setitem__((0, 0), 1.0),
                      lambda: res.reshape(-1)[1:].fill(0.0),
                      lambda: setattr(res.flags, "writeable", True),
                      lambda: np.add(res, 1.0, out=res)):
            try:
                write()
            except ValueError as exc:
                errors.append(str(exc))
        return res, errors

    res = launch(body, 4)
    want = spec.expected(xs, "tree").reshape(2, 5)
    for r, (arr, errors) in enumerate(res):
        assert same_bits(arr, want) and len(errors) == 4, (r, errors)
        assert np.shares_memory(arr, res[0][0])


def test_out_gives_a_private_writable_copy():
    xs = inputs(3, 11, np.float32, seed=3)

    def body(comm):
        out = np.full(11, -1.0, np.float32)
        got = comm.allreduce(xs[comm.rank], algorithm="rabenseifner", out=out)
        out[0] = comm.rank  # private: other ranks' results do not change
        comm.barrier()
        return got is out, out

    res = launch(body, 3)
    want = spec.expected(xs, "rabenseifner")
    for r, (is_out, out) in enumerate(res):
        assert is_out and out[0] == r and same_bits(out[1:], want[1:])


def test_read_only_out_is_refused():
    def body(comm):
        out = np.zeros(4)
        out.flags.writeable = False
        return comm.allreduce(np.ones(4), out=out)

    with pytest.raises(tp.CommArgumentError, match="out must be writable"):
        launch(body, 2)


def test_held_results_survive_and_dropped_buffers_are_reused():
    def body(comm):
        held = comm.allreduce(np.full(1000, comm.rank + 1.0))
        if comm.rank != 2:
            held = None  # one reference on one rank must keep the buffer from reuse
        comm.barrier()
        later = comm.allreduce(np.full(1000, 10.0 * comm.rank))
        ptr = later.__array_interface__["data"][0]
        del later
        comm.barrier()  # every rank has dropped `later`: its buffer is free again
        again = comm.allreduce(np.full(1000, 5.0))
        return held, again, ptr == again.__array_interface__["data"][0]

    res = launch(body, 4)
    assert np.all(res[2][0] == 10.0)
    for _held, again, reused in res:
        assert np.all(again == 20.0) and reused


def test_mismatched_op_fails_every_rank_with_the_same_message():
    res = launch(lambda c: c.allreduce(np.ones(4), op="max" if c.rank == 1 else "sum"), 3,
                 return_exceptions=True)
    assert all(isinstance(e, tp.CollectiveMismatchError) for e in res)
    assert "op=sum" in str(res[0]) and "op=max" in str(res[0])


def test_sub_communicators_reduce_concurrently():
    def body(comm):
        sub = comm.split(comm.rank % 2)
        return [sub.allreduce(np.arange(7.0) * comm.rank, algorithm=a) for a in ALGS]

    res = launch(body, 5)
    for r, outs in enumerate(res):
        ranks = [q for q in range(5) if q % 2 == r % 2]
        xs = [np.arange(7.0) * q for q in ranks]
        for a, got in zip(ALGS, outs):
            assert same_bits(got, spec.expected(xs, a, group_size=5)), (r, a)


def test_results_as_inputs_and_out_aliasing_the_input():
    xs = inputs(4, 13, np.float64, seed=8)

    def body(comm):
        once = comm.allreduce(xs[comm.rank])  # the same read-only array on every rank
        twice = comm.allreduce(once)  # inputs that share memory; `once` stays intact
        mine = xs[comm.rank].copy()
        comm.allreduce(mine, algorithm="tree", out=mine)  # the result replaces the input
        return once, twice, mine

    once_want = spec.expected(xs, "ring")
    twice_want = spec.expected([once_want] * 4, "ring")
    for once, twice, mine in launch(body, 4):
        assert same_bits(once, once_want) and same_bits(twice, twice_want)
        assert same_bits(mine, spec.expected(xs, "tree"))
