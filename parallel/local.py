"""The `local` backend: N ranks as N threads of one process, talking through mailboxes.

A mailbox is a FIFO per (communicator, source, destination, tag); sends never block and
pass array references (algorithms never write an array after sending it; user sends copy).
A receive fails instead of hanging: when its peer failed or exited, or after `timeout`.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from tilepy.parallel.comm import DEBUG_TAG, Communicator
from tilepy.parallel.errors import (
    CommAbortedError,
    CommTimeoutError,
    RankExitedError,
)


class World:
    """Shared state of one `launch`: mailboxes, the first failure, which ranks exited."""

    def __init__(self, size: int, timeout: float):
        self.size, self.timeout = size, timeout
        self.lock = threading.Lock()
        self.boxes: dict[tuple, tuple[deque, threading.Condition]] = {}
        self.failed: tuple[int, BaseException] | None = None
        self.failed_at = 0.0
        self.exited = [False] * size

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


class LocalComm(Communicator):
    """One rank of a local world (or of a sub-communicator made by `split`)."""

    backend = "local"

    def __init__(self, world: World, ctx: str, rank: int, members: list[int],
                 debug: bool = False, node_size: int | None = None):
        super().__init__(rank, len(members), world.timeout, debug,
                         node_size or len(members))
        self.world, self.ctx, self.members = world, ctx, members
        self._splits = 0

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


