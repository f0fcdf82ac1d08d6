"""The `local` backend: N ranks as N threads of one process, talking through mailboxes.

A mailbox is a FIFO per (communicator, source, destination, tag); sends never block and
pass array references (algorithms never write an array after sending it; user sends copy).
Allreduce meets in shared memory instead: the ranks post their inputs, each reduces its
share of the elements into one result in the algorithm's order (plans.py), and all get
that result read-only. Every wait fails instead of hanging: when a peer failed or exited,
or after `timeout`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

import numpy as np

from tilepy.parallel import plans
from tilepy.parallel.comm import DEBUG_TAG, Communicator
from tilepy.parallel.errors import (
    CollectiveMismatchError,
    CommAbortedError,
    CommTimeoutError,
    RankExitedError,
)

POOL_SIZE = 4  # result buffers a world keeps for reuse once nobody references them


class World:
    """Shared state of one `launch`: mailboxes, the first failure, which ranks exited."""

    def __init__(self, size: int, timeout: float):
        self.size, self.timeout = size, timeout
        self.lock = threading.Lock()
        self.boxes: dict[tuple, tuple[deque, threading.Condition]] = {}
        self.failed: tuple[int, BaseException] | None = None
        self.failed_at = 0.0
        self.exited = [False] * size
        self.meetings: dict[tuple, Meeting] = {}
        self.pool: list[np.ndarray] = []  # raw result buffers, most recent first

    def _box(self, key: tuple) -> tuple[deque, threading.Condition]:
        """The mailbox and its condition (sharing the world's lock); call with the lock."""
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = (deque(), threading.Condition(self.lock))
        return box

    def put(self, key: tuple, item) -> None:
        with self.lock:
            items, cond = self._box(key)
            items.append(item)
            cond.notify()  # only this mailbox's reader wakes

    def get(self, key: tuple, me: int, peer: int, what: str, abortable: bool = True):
        """Pop the next item of a mailbox; `abortable=False` keeps waiting after a failure
        elsewhere (the debug check's messages are all sent, so every rank sees them)."""
        deadline = time.monotonic() + self.timeout
        with self.lock:
            items, cond = self._box(key)
            while True:
                if items:
                    return items.popleft()
                self._raise_if_stuck(me, peer, what, deadline, abortable)
                cond.wait(min(1.0, max(deadline - time.monotonic(), 1e-3)))

    def _raise_if_stuck(self, me, peer, what, deadline, abortable) -> None:
        if self.failed is not None and abortable:
            rank, exc = self.failed
            raise CommAbortedError(
                f"rank {me} stopped in {what}: rank {rank} failed with "
                f"{type(exc).__name__}: {exc}")
        if self.exited[peer]:
            raise RankExitedError(
                f"rank {me} waits for rank {peer} in {what}, but rank {peer} has finished",
                hint="the ranks called different collectives or point-to-point calls")
        if time.monotonic() >= deadline:
            raise CommTimeoutError(
                f"rank {me} waited {self.timeout:g} s for rank {peer} in {what}",
                hint="a rank is stuck or called a different collective; raise the timeout "
                     "if the work between calls is long")

    def _wake_all(self) -> None:
        for _, cond in self.boxes.values():
            cond.notify_all()
        for m in self.meetings.values():
            m.cond.notify_all()

    def meeting(self, key: tuple, size: int) -> Meeting:
        """The shared state of one collective call (created by the first rank to come)."""
        with self.lock:
            m = self.meetings.get(key)
            if m is None:
                m = self.meetings[key] = Meeting(size, threading.Condition(self.lock))
            return m

    def wait_all(self, m: Meeting, field: str, members: list[int], me: int, describe):
        """Count this rank in `m.<field>` and wait until every rank has; the last one
        notifies. `describe()` names the call in errors. Call with the lock held."""
        setattr(m, field, getattr(m, field) + 1)
        deadline = time.monotonic() + self.timeout
        if getattr(m, field) == m.size:
            m.cond.notify_all()
        while getattr(m, field) < m.size:
            peer = members[m.missing(field)]
            if self.failed is not None or self.exited[peer] or time.monotonic() >= deadline:
                self._raise_if_stuck(members[me], peer, describe(), deadline, True)
            m.cond.wait(min(1.0, max(deadline - time.monotonic(), 1e-3)))

    def acquire(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of `nbytes` for a shared result: a pooled one that nobody else
        references any more (no live result array, view or memoryview of it), or a new
        one. Call with the lock held."""
        for i in range(len(self.pool)):
            raw = self.pool[i]
            # references: the pool's list, `raw` here and getrefcount's argument
            if raw.nbytes == nbytes and sys.getrefcount(raw) <= 3:
                del self.pool[i]
                break
        else:
            raw = np.empty(nbytes, np.uint8)
        self.pool.insert(0, raw)
        del self.pool[POOL_SIZE:]
        return raw

    def fail(self, rank: int, exc: BaseException) -> None:
        with self.lock:
            if self.failed is None or (isinstance(self.failed[1], CommAbortedError)
                                       and not isinstance(exc, CommAbortedError)):
                self.failed, self.failed_at = (rank, exc), time.monotonic()
            self._wake_all()

    def exit(self, rank: int) -> None:
        with self.lock:
            self.exited[rank] = True
            self._wake_all()


class Meeting:
    """One shared-memory collective call: the ranks' inputs and call signatures, how many
    have posted and finished, and the result buffer (allocated by the last to post)."""

    def __init__(self, size: int, cond: threading.Condition):
        self.size, self.cond = size, cond
        self.inputs: list = [None] * size
        self.calls: list = [None] * size
        self.finished: list = [None] * size
        self.posted = self.done = 0
        self.raw = None

    def missing(self, field: str) -> int:
        """The lowest rank that has not yet posted (field "posted") or finished."""
        seen = self.inputs if field == "posted" else self.finished
        return next(i for i, v in enumerate(seen) if v is None)


class LocalComm(Communicator):
    """One rank of a local world (or of a sub-communicator made by `split`).

    `shared_memory` (default True): allreduce meets in shared memory (same bits as the
    message-passing algorithms); set it False on every rank to pass messages instead.
    """

    backend = "local"
    shared_memory = True

    def __init__(self, world: World, ctx: str, rank: int, members: list[int],
                 debug: bool = False, node_size: int | None = None):
        super().__init__(rank, len(members), world.timeout, debug,
                         node_size or len(members))
        self.world, self.ctx, self.members = world, ctx, members
        self._splits = 0
        self._scratch: dict = {}

    def _send_raw(self, x, dst, tag):
        self.world.put((self.ctx, self.rank, dst, tag), x)

    def _recv_raw(self, src, tag, count, dtype):
        got = self.world.get((self.ctx, src, self.rank, tag), self.members[self.rank],
                             self.members[src], self._current, tag != DEBUG_TAG)
        if count is not None and (got.size != count or got.dtype != dtype):
            raise self._mismatch(src, count, dtype, f"{got.size} x {got.dtype}")
        return got

    def _sendrecv_raw(self, x, dst, src, tag, count, dtype, into=None):
        self._send_raw(x, dst, tag)  # references travel: `into` is never written here
        return self._recv_raw(src, tag, count, dtype)

    def _shared_allreduce(self, flat, op, algorithm, group_size):
        """The reduction as one read-only array shared by all ranks, or None when this
        call passes messages instead (shared_memory off, or an algorithm without a plan).

        Two meetings per call, whatever the size: post the input (the last rank to post
        allocates the result), reduce this rank's share of the elements into it in the
        plan's order (numpy releases the GIL, so ranks overlap), wait for all shares.
        """
        if not self.shared_memory or algorithm not in plans.ALGORITHMS:
            return None
        w, p, r = self.world, self.size, self.rank
        m = w.meeting((self.ctx, self._seq), p)
        call = (flat.size, flat.dtype, op, algorithm,
                group_size if algorithm == "hierarchical" else None)
        describe = lambda: self._current  # noqa: E731 - formatted only for an error
        with w.lock:
            m.inputs[r], m.calls[r] = flat, call
            if m.posted + 1 == p and all(c == call for c in m.calls):
                m.raw = w.acquire(flat.nbytes)
            w.wait_all(m, "posted", self.members, r, describe)
        self._check_calls(m.calls)
        dest = m.raw.view(flat.dtype)
        segments = plans.plan(algorithm, flat.size, p, group_size)
        lo, hi = plans.share(flat.size, p, r)
        plans.reduce_range(m.inputs, dest, segments, lo, hi, op, self._scratch_rows)
        with w.lock:
            m.finished[r] = True
            w.wait_all(m, "done", self.members, r, describe)
            if w.meetings.get((self.ctx, self._seq)) is m:
                del w.meetings[(self.ctx, self._seq)]
        return np.frombuffer(memoryview(m.raw).toreadonly(), flat.dtype)

    def _check_calls(self, calls: list) -> None:
        """Every rank sees every call, so every rank raises the same mismatch."""
        mine = calls[self.rank]
        for src, call in enumerate(calls):
            if call[:2] != mine[:2]:
                raise self._mismatch(src, mine[0], mine[1], f"{call[0]} x {call[1]}")
            if call != mine:
                raise CollectiveMismatchError(
                    f"rank {self.rank} called {self._current} with op={mine[2]}, "
                    f"algorithm={mine[3]}, group_size={mine[4]} but rank {src} with "
                    f"op={call[2]}, algorithm={call[3]}, group_size={call[4]}",
                    hint="every rank must pass the same op, algorithm and group_size")

    def _scratch_rows(self, rows: int, block: int, dtype) -> np.ndarray:
        """Reused per-rank scratch for the partial results of one block (stays in cache)."""
        buf = self._scratch.get(dtype)
        if buf is None or buf.shape[0] < rows or buf.shape[1] < block:
            buf = self._scratch[dtype] = np.empty((rows, block), dtype)
        return buf

    def _make_sub(self, members: list[int], color: int):
        self._splits += 1
        ctx = f"{self.ctx}/{self._splits}:{color}"
        world_members = [self.members[m] for m in members]
        return LocalComm(self.world, ctx, members.index(self.rank), world_members,
                         self.debug, min(self.node_size, len(members)))


def run(fn, size: int, timeout: float, debug: bool, node_size: int | None, args, kwargs,
        return_exceptions: bool):
    """Run fn(comm, *args, **kwargs) on `size` threads; results (or the failure) in order."""
    world = World(size, timeout)
    results: list = [None] * size
    errors: list = [None] * size

    def body(r):
        comm = LocalComm(world, "world", r, list(range(size)), debug, node_size)
        try:
            results[r] = fn(comm, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors[r] = exc
            world.fail(r, exc)
        finally:
            world.exit(r)

    threads = [threading.Thread(target=body, args=(r,), name=f"tilepy-rank-{r}", daemon=True)
               for r in range(size)]
    for t in threads:
        t.start()
    _join(threads, world)
    return _outcome(results, errors, threads, world, return_exceptions)


def _join(threads, world: World) -> None:
    """Wait for every rank; once one failed, wait at most `timeout` more for the rest."""
    for t in threads:
        while t.is_alive():
            t.join(0.05)
            if world.failed is not None and time.monotonic() - world.failed_at > world.timeout:
                return


def _outcome(results, errors, threads, world, return_exceptions):
    for r, t in enumerate(threads):
        if t.is_alive():
            errors[r] = CommTimeoutError(
                f"rank {r} did not finish within {world.timeout:g} s after rank "
                f"{world.failed[0]} failed")
    if return_exceptions:
        return [e if e is not None else res for res, e in zip(results, errors)]
    if world.failed is not None:
        rank, exc = world.failed
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised on rank {rank} of {len(threads)})")
        raise exc
    return results


