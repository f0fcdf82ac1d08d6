"""Faults and bad input fail every rank with a clear error within a time limit: the error
names the ranks that did not arrive (or returned, or exited) and the user's call site."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time

import numpy as np
import pytest

import tilepy.parallel as tp
from tests.parallel.helpers import launch


def line(tag: str) -> int:
    """The line of this file that ends with the comment `# tag`."""
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {tag}"))


def spin(stop: threading.Event, limit: float = 10.0) -> None:
    """A rank stuck computing (until the test ends, at most `limit` seconds)."""
    stop.wait(limit)  # spin


@pytest.fixture
def stop():
    ev = threading.Event()
    yield ev
    ev.set()


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


def test_a_stuck_rank_fails_the_launch_after_one_timeout(stop):
    def body(comm):
        if comm.rank == 1:
            spin(stop)
        return comm.allreduce(np.ones(3))  # wait here

    t0 = time.monotonic()
    with pytest.raises(tp.CommTimeoutError) as info:
        launch(body, 4, timeout=1.0)
    assert time.monotonic() - t0 < 1.9  # one timeout, not one more for the stuck rank
    e = info.value
    assert (e.loc.file, e.loc.line) == (__file__, line("wait here"))
    msg = str(e)
    assert "rank 1 did not reach comm.allreduce (collective #1 on the world communicator) " \
           "within 1 s: ranks 0, 2 and 3 wait there for it" in msg
    assert f"rank 1 is computing at {__file__}:{line('spin')} (in spin)" in msg
    assert "timeout=SECONDS" in msg and "TILEPY_COMM_TIMEOUT=SECONDS" in msg


def test_a_rank_still_computing_after_a_failure_is_reported(stop):
    def body(comm):
        if comm.rank == 2:
            spin(stop)
        comm.barrier()

    res = timed(body, 3, 2.0, timeout=0.5)
    assert any(isinstance(e, tp.CommTimeoutError) and "rank 2 did not reach comm.barrier "
               "(collective #1 on the world communicator) within 0.5 s" in str(e) for e in res)
    assert isinstance(res[2], tp.CommAbortedError)
    assert "rank 2 was still running when rank" in str(res[2])


def test_computing_longer_than_the_timeout_is_not_waiting():
    def body(comm):
        time.sleep(0.8 + 0.1 * comm.rank)  # every rank computes longer than the timeout
        x = comm.allreduce(np.ones(3))
        time.sleep(0.8)
        return x.tolist()

    assert launch(body, 3, timeout=0.5) == [[3.0] * 3] * 3


def test_the_end_of_launch_waits_at_most_the_timeout(stop):
    def body(comm):
        if comm.rank == 1:
            spin(stop)
        return comm.rank

    t0 = time.monotonic()
    with pytest.raises(tp.CommTimeoutError) as info:
        launch(body, 3, timeout=1.0)
    assert time.monotonic() - t0 < 1.9
    assert "rank 1 did not return within 1 s after ranks 0 and 2 returned" in str(info.value)
    assert (info.value.loc.file, info.value.loc.line) == (__file__, line("spin"))


def test_timeout_setting(monkeypatch):
    from tilepy.parallel.launch import DEFAULT_TIMEOUT, comm_timeout

    monkeypatch.delenv("TILEPY_COMM_TIMEOUT", raising=False)
    assert comm_timeout() == DEFAULT_TIMEOUT == 300.0
    assert comm_timeout(2) == 2.0
    monkeypatch.setenv("TILEPY_COMM_TIMEOUT", "7.5")
    assert comm_timeout() == 7.5 and comm_timeout(2) == 2.0
    assert comm_timeout(float("inf")) == float("inf")
    for bad in ("soon", "0", "-1", "nan"):
        monkeypatch.setenv("TILEPY_COMM_TIMEOUT", bad)
        with pytest.raises(tp.CommArgumentError, match=f"TILEPY_COMM_TIMEOUT={bad} is not"):
            tp.launch(lambda c: None, 2)
    with pytest.raises(tp.CommArgumentError, match="timeout is not a positive number"):
        tp.launch(lambda c: None, 2, timeout=0)


def test_the_environment_variable_is_read_at_launch(monkeypatch):
    def body(comm):
        if comm.rank == 1:
            time.sleep(3.0)
        return comm.allreduce(np.ones(3))

    monkeypatch.setenv("TILEPY_COMM_TIMEOUT", "0.5")
    t0 = time.monotonic()
    with pytest.raises(tp.CommTimeoutError, match="within 0.5 s"):
        tp.launch(body, 2)
    assert time.monotonic() - t0 < 2.5


def test_sys_exit_in_a_rank_is_an_error_naming_the_rank():
    def body(comm):
        if comm.rank == 1:
            sys.exit(3)
        return comm.allreduce(np.ones(3))

    with pytest.raises(tp.RankFailedError, match=r"rank 1 of 3 called sys.exit\(3\)") as info:
        launch(body, 3)
    assert isinstance(info.value.__cause__, SystemExit)
    res = timed(body, 3, 5.0)
    assert isinstance(res[1], SystemExit)
    for r in (0, 2):
        assert isinstance(res[r], tp.CommAbortedError)
        assert "rank 1 failed with SystemExit: 3" in str(res[r])


NOTES = pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes: Python 3.11")


def test_other_exits_and_exceptions_name_the_rank():
    def body(comm):
        if comm.rank == 2:
            raise KeyboardInterrupt
        return comm.rank

    with pytest.raises(tp.RankFailedError, match="rank 2 of 3 raised KeyboardInterrupt"):
        launch(body, 3)

    def fails(comm):
        if comm.rank == 1:
            raise KeyError("no such key")
        return comm.allreduce(np.ones(2))

    with pytest.raises(KeyError) as info:
        launch(fails, 2)
    assert getattr(info.value, "__notes__", None) == (
        ["(raised on rank 1 of 2)"] if sys.version_info >= (3, 11) else None)


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler for the test's duration: `_thread.interrupt_main` does
    nothing while SIGINT is ignored or left to the OS, and a library loaded by an earlier
    test in the same process may have set either."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@NOTES
def test_an_interrupted_launch_says_where_every_rank_is(stop, default_sigint):
    def body(comm):
        if comm.rank == 1:
            time.sleep(0.3)
            _thread.interrupt_main()  # as Ctrl-C does
            spin(stop)
        return comm.allreduce(np.ones(3))  # interrupted here

    with pytest.raises(KeyboardInterrupt) as info:
        launch(body, 3)
    note = "\n".join(info.value.__notes__)
    call = "comm.allreduce (collective #1 on the world communicator)"
    for r in (0, 2):
        assert f"rank {r} is in {call} at {__file__}:{line('interrupted here')}" in note
    assert f"rank 1 is computing at {__file__}:{line('spin')}" in note


def test_a_rank_that_returns_early_is_named_with_the_call_it_skipped():
    def body(comm):
        if comm.rank == 0:
            return None
        return comm.allgather(np.ones(3))  # skipped

    res = timed(body, 3, 5.0)
    assert res[0] is None and all(isinstance(e, tp.CommError) for e in res[1:])
    e = next(e for e in res[1:] if isinstance(e, tp.RankExitedError))
    assert "rank 0 returned from its function without making comm.allgather (collective #1 " \
           "on the world communicator), where rank" in str(e)
    assert (e.loc.file, e.loc.line) == (__file__, line("skipped"))
    assert "allgatherv" not in str(e)


@pytest.mark.parametrize("shared", [True, False])
def test_a_returned_rank_is_noticed_while_another_still_computes(stop, shared):
    def body(comm):
        comm.shared_memory = shared
        if comm.rank == 2:
            return None
        if comm.rank == 1:
            spin(stop)
        return comm.allreduce(np.ones(3), algorithm="recursive_doubling")

    t0 = time.monotonic()
    with pytest.raises(tp.RankExitedError, match="rank 2 returned from its function without "
                                                  "making comm.allreduce"):
        launch(body, 4)
    assert time.monotonic() - t0 < 2.0


def test_errors_in_a_call_point_at_the_users_line():
    def body(comm):
        return comm.send(np.ones(2), dest=comm.size)  # bad peer

    res = timed(body, 2, 5.0)
    for e in res:
        assert isinstance(e, tp.CommArgumentError)
        assert (e.loc.file, e.loc.line) == (__file__, line("bad peer"))
        assert str(e).startswith(f"{__file__}:{line('bad peer')}: destination rank 2 is not")


def test_collective_order_swapped_without_debug_still_fails():
    def body(comm):
        a, b = np.ones(3), np.ones(7)
        if comm.rank == 0:
            return comm.allreduce(a), comm.allreduce(b)
        return comm.allreduce(b), comm.allreduce(a)

    res = timed(body, 2, 5.0)
    assert all(isinstance(e, tp.CommError) for e in res)
