"""The `local` backend: N ranks as N threads of one process. Sends pass array references
(never blocking) through a FIFO per (communicator, source, destination, tag); allreduce
meets in shared memory instead, each rank reducing its share in the algorithm's order
(plans.py). Every wait fails instead of hanging: when a peer failed or returned, or after
`timeout` in one wait (stall.py's errors name the ranks missing and where they are).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

import numpy as np

from tilepy.parallel import plans, stall
from tilepy.parallel.comm import DEBUG_TAG, Communicator
from tilepy.parallel.errors import (
    CollectiveMismatchError,
    CommAbortedError,
    RankFailedError,
)
from tilepy.parallel.sites import Call, thread_site

POOL_SIZE = 4  # result buffers a world keeps for reuse once nobody references them
# After a failure, seconds `launch` waits for the ranks still inside a call to stop.
STOP_GRACE = 1.0


class World:
    """Shared state of one `launch`: mailboxes, the first failure, which ranks exited, and
    each rank's thread and communicators (to tell where a rank is)."""

    def __init__(self, size: int, timeout: float):
        self.size, self.timeout = size, timeout
        self.lock = threading.Lock()
        self.boxes: dict[tuple, tuple[deque, threading.Condition]] = {}
        self.failed: tuple[int | None, BaseException] | None = None  # rank None: no rank's
        self.failed_at = 0.0
        self.exited = [False] * size
        self.returned_at: float | None = None  # when the first rank returned normally
        self.errors: list[BaseException | None] = [None] * size
        self.idents: list[int | None] = [None] * size
        self.comms: list[list[LocalComm]] = [[] for _ in range(size)]
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

    def get(self, key: tuple, comm: LocalComm, peer: int, abortable: bool = True):
        """Pop the next item of a mailbox (`peer`: the sender's world rank); `abortable=False`
        keeps waiting after a failure elsewhere (the debug check's messages are all sent,
        so every rank sees them)."""
        deadline = time.monotonic() + self.timeout
        with self.lock:
            items, cond = self._box(key)
            while True:
                if items:
                    return items.popleft()
                self._raise_if_stuck(comm, [peer], peer, deadline, abortable)
                cond.wait(min(1.0, max(deadline - time.monotonic(), 1e-3)))

    def _raise_if_stuck(self, comm, needed, peer, deadline, abortable=True) -> None:
        """Raise if `comm`'s rank cannot stop waiting for the world ranks `needed`: another
        rank failed, one of them has returned, or `deadline` passed. Call with the lock."""
        me = comm.members[comm.rank]
        if self.failed is not None and abortable:
            raise CommAbortedError(f"rank {me} stopped in {comm._current}: {self.failure()}")
        gone = any(self.exited[q] for q in needed)
        if not gone and time.monotonic() < deadline:
            return
        call = comm._api or Call("a communication call", comm.cid, 0, peer, None)
        states = self.states()
        if gone:
            raise stall.returned_error(me, call, comm.members, states, peer)
        raise stall.timeout_error(me, call, comm.members, states, self.timeout, peer)

    def failure(self) -> str:
        """What stopped the launch, for the other ranks' CommAbortedError."""
        rank, exc = self.failed
        what = getattr(exc, "message", None) or str(exc)
        if rank is None:
            return f"the launch stopped ({type(exc).__name__}{': ' + what if what else ''})"
        return f"rank {rank} failed with {type(exc).__name__}" + (f": {what}" if what else "")

    def states(self) -> dict[int, stall.RankState]:
        """Every rank's state now, read without stopping the ranks (for messages only)."""
        out = {}
        for q in range(self.size):
            comms = list(self.comms[q])
            seqs = {c.cid: c._ncalls for c in comms}
            exc = self.errors[q]
            if exc is not None:
                out[q] = stall.RankState(q, stall.FAILED, seqs, detail=type(exc).__name__)
            elif self.exited[q]:
                out[q] = stall.RankState(q, stall.RETURNED, seqs)
            else:
                api = next((c._api for c in comms if c._api is not None), None)
                out[q] = stall.in_call(q, api, seqs) if api is not None else \
                    stall.computing(q, thread_site(self.idents[q]), seqs)
        return out

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

    def wait_all(self, m: Meeting, field: str, comm: LocalComm):
        """Count `comm`'s rank in `m.<field>` and wait until every rank has; the last one
        notifies. Call with the lock held."""
        setattr(m, field, getattr(m, field) + 1)
        deadline = time.monotonic() + self.timeout
        if getattr(m, field) == m.size:
            m.cond.notify_all()
        while getattr(m, field) < m.size:
            needed = [comm.members[i] for i in m.missing(field)]
            self._raise_if_stuck(comm, needed, needed[0], deadline)
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

    def fail(self, rank: int | None, exc: BaseException) -> None:
        with self.lock:
            if rank is not None:
                self.errors[rank] = exc
            if self.failed is None or (isinstance(self.failed[1], CommAbortedError)
                                       and not isinstance(exc, CommAbortedError)):
                self.failed, self.failed_at = (rank, exc), time.monotonic()
            self._wake_all()

    def exit(self, rank: int) -> None:
        with self.lock:
            self.exited[rank] = True
            if self.errors[rank] is None and self.returned_at is None:
                self.returned_at = time.monotonic()
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

    def missing(self, field: str) -> list[int]:
        """The ranks that have not yet posted (field "posted") or finished."""
        seen = self.inputs if field == "posted" else self.finished
        return [i for i, v in enumerate(seen) if v is None]


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
                         node_size or len(members), ctx, members)
        self.world, self.ctx, self.members = world, ctx, members
        self._splits = 0
        self._scratch: dict = {}
        world.comms[members[rank]].append(self)

    def _send_raw(self, x, dst, tag):
        # the array itself travels: algorithms never write an array after sending it, and
        # the public sends copy
        self.world.put((self.ctx, self.rank, dst, tag), x)

    def _recv_raw(self, src, tag, count, dtype):
        got = self.world.get((self.ctx, src, self.rank, tag), self, self.members[src],
                             tag != DEBUG_TAG)
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
        with w.lock:
            m.inputs[r], m.calls[r] = flat, call
            if m.posted + 1 == p and all(c == call for c in m.calls):
                m.raw = w.acquire(flat.nbytes)
            w.wait_all(m, "posted", self)
        self._check_calls(m.calls)
        dest = m.raw.view(flat.dtype)
        segments = plans.plan(algorithm, flat.size, p, group_size)
        lo, hi = plans.share(flat.size, p, r)
        plans.reduce_range(m.inputs, dest, segments, lo, hi, op, self._scratch_rows)
        with w.lock:
            m.finished[r] = True
            w.wait_all(m, "done", self)
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
    """Run fn(comm, *args, **kwargs) on `size` threads; results (or the failure) in order.
    Ranks are threads, so a rank can neither be stopped from outside nor end the process
    without ending every rank."""
    world = World(size, timeout)
    results: list = [None] * size

    def body(r):
        world.idents[r] = threading.get_ident()
        comm = LocalComm(world, "world", r, list(range(size)), debug, node_size)
        try:
            results[r] = fn(comm, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            world.fail(r, exc)
        finally:
            world.exit(r)

    threads = [threading.Thread(target=body, args=(r,), name=f"tilepy-rank-{r}", daemon=True)
               for r in range(size)]
    for t in threads:
        t.start()
    try:
        _join(threads, world)
    except KeyboardInterrupt as exc:  # Ctrl-C: say where every rank is, stop the waiting ones
        note = "tilepy.parallel: the ranks were interrupted here:\n" + \
            stall.summary(list(world.states().values()))
        world.fail(None, exc)
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        raise
    return _outcome(results, threads, world, return_exceptions)


def _join(threads, world: World) -> None:
    """Wait for every rank. Once a rank failed, wait at most STOP_GRACE for the ranks still
    inside a call (they stop at once; a computing rank cannot be stopped from outside).
    Once a rank returned, the others must return within `timeout`: the end of launch is a
    collective (on MPI it gathers the results), so the ranks that returned wait there."""
    while True:
        alive = [r for r, t in enumerate(threads) if t.is_alive()]
        if not alive:
            return
        threads[alive[0]].join(0.05)
        now = time.monotonic()
        if world.failed is not None:
            states = world.states()
            if now - world.failed_at > STOP_GRACE or all(
                    states[r].kind != stall.IN_CALL for r in alive):
                return
        elif world.returned_at is not None and now - world.returned_at > world.timeout:
            states = world.states()
            done = [r for r in range(len(threads)) if r not in alive]
            world.fail(None, stall.end_timeout_error(done, [states[r] for r in alive],
                                                     world.timeout))


def _outcome(results, threads, world: World, return_exceptions: bool):
    errors = list(world.errors)
    rank, exc = world.failed if world.failed is not None else (None, None)
    for r, t in enumerate(threads):
        if t.is_alive() and errors[r] is None:
            errors[r] = exc if rank is None else CommAbortedError(
                f"rank {r} was still running when {world.failure()}: a rank's thread "
                "cannot be stopped from outside; it stops at its next communication call")
    if return_exceptions:
        return [e if e is not None else res for res, e in zip(results, errors)]
    if exc is not None:
        raise _for_caller(exc, rank, len(threads))
    return results


def _for_caller(exc: BaseException, rank: int | None, size: int) -> BaseException:
    """The error `launch` raises for a rank's failure: the rank's own exception with a note
    naming the rank, or, for an exit (SystemExit, KeyboardInterrupt...) that must not end
    the caller, a RankFailedError naming the rank and the exit."""
    if rank is None:
        return exc
    if isinstance(exc, Exception):
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised on rank {rank} of {size})")
        return exc
    what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else \
        f"raised {type(exc).__name__}"
    err = RankFailedError(
        f"rank {rank} of {size} {what}; on the local backend the ranks are threads of this "
        f"process, so a rank cannot end it",
        hint="return from the rank's function, or raise an exception")
    err.__cause__ = exc
    return err
