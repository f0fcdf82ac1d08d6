"""Faults and bad input fail every rank with a clear error within a time limit."""

from __future__ import annotations

import time

import numpy as np
import pytest

import tilepy.parallel as tp
from tests.parallel.helpers import launch


def timed(fn, p, limit, **kw):
    t0 = time.monotonic()
    out = launch(fn, p, return_exceptions=True, **kw)
    assert time.monotonic() - t0 < limit
    return out


def test_mismatched_shapes_fail_every_rank():
    res = timed(lambda c: c.allreduce(np.ones(5 + (c.rank == 2))), 4, 5.0)
    assert all(isinstance(e, tp.CommError) for e in res)
    assert any(isinstance(e, tp.CollectiveMismatchError) for e in res)
    assert all("allreduce" in str(e) for e in res)


def test_mismatched_dtypes_fail_every_rank():
    res = timed(lambda c: c.allreduce(np.ones(8, np.float32 if c.rank else np.float64)), 3, 5.0)
    assert all(isinstance(e, tp.CommError) for e in res)
    assert "float64" in str(res[1]) or "float64" in str(res[2])


def test_debug_mode_names_every_ranks_call_on_every_rank():
    def body(comm):
        comm.allreduce(np.ones(4))
        if comm.rank == 1:
            return comm.bcast(np.ones(4))
        return comm.allreduce(np.ones(4), op="max")

    res = timed(body, 3, 5.0, debug=True)
    for e in res:
        assert isinstance(e, tp.CollectiveMismatchError)
        assert "rank 1: #2 bcast" in str(e) and "rank 0: #2 allreduce" in str(e)


def test_a_failing_rank_stops_the_others_quickly():
    def body(comm):
        if comm.rank == 2:
            raise ValueError("boom on two")
        return comm.allreduce(np.ones(3))

    res = timed(body, 4, 3.0)
    assert isinstance(res[2], ValueError)
    for r in (0, 1, 3):
        assert isinstance(res[r], tp.CommAbortedError) and "boom on two" in str(res[r])
    with pytest.raises(ValueError, match="boom on two"):
        launch(body, 4)


def test_a_rank_that_never_arrives_times_out():
    def body(comm):
        if comm.rank == 1:
            time.sleep(3.0)
            return None
        return comm.allreduce(np.ones(3))

    res = timed(body, 3, 2.5, timeout=0.5)
    assert isinstance(res[0], (tp.CommTimeoutError, tp.CommAbortedError))
    assert any(isinstance(e, tp.CommTimeoutError) and "waited 0.5 s" in str(e) for e in res)


def test_a_rank_that_returns_early_is_reported():
    def body(comm):
        return None if comm.rank == 0 else comm.allreduce(np.ones(3), algorithm="tree")

    res = timed(body, 3, 5.0)
    assert any(isinstance(e, tp.RankExitedError) and "rank 0 has finished" in str(e)
               for e in res)
    assert all(isinstance(e, tp.CommError) for e in res[1:])


def test_collective_order_swapped_without_debug_still_fails():
    def body(comm):
        a, b = np.ones(3), np.ones(7)
        if comm.rank == 0:
            return comm.allreduce(a), comm.allreduce(b)
        return comm.allreduce(b), comm.allreduce(a)

    res = timed(body, 2, 5.0)
    assert all(isinstance(e, tp.CommError) for e in res)
