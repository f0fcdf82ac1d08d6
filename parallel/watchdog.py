"""The mpi backend's watchdog: one thread per launch in each rank's process, so that no
blocking MPI call hangs. When a call has waited `timeout`, or waits for a rank that returned
or whose process ended, it asks the other ranks where they are (over a control communicator
of its own; needs MPI_THREAD_MULTIPLE, mpi4py's default, else it only enforces the timeout)
and fails the job (`on_error`: print, then MPI_Abort) naming the ranks that did not arrive.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref

from tilepy.parallel import stall
from tilepy.parallel.sites import Call, thread_site

POLL = 0.05  # seconds between two checks
ANSWER_WAIT = 1.0  # seconds a failing rank waits for the others to say where they are
# A call still blocked on a rank this long after that rank returned (or its process ended)
# fails; the delay lets messages the rank sent before returning arrive.
GONE_GRACE = 0.5
SERVE_AFTER = 0.1  # seconds in one MPI call after which the watchdog talks meanwhile
TAG_QUERY, TAG_STATE, TAG_DONE = 1, 2, 3
BLIND = "The other ranks cannot say where they are: the MPI library lacks MPI_THREAD_MULTIPLE"


class Watchdog:
    """Created collectively by every rank at the start of `launch` (it duplicates
    MPI_COMM_WORLD and exchanges host names and process ids); `close()` at the end."""

    def __init__(self, MPI, timeout: float, on_error):
        self.MPI, self.timeout, self.on_error = MPI, timeout, on_error
        self.ctrl = MPI.COMM_WORLD.Dup()
        self.group = self.ctrl.Get_group()
        self.rank, self.size = self.ctrl.Get_rank(), self.ctrl.Get_size()
        self.talk = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.host = socket.gethostname()
        self.procs = self.ctrl.allgather((self.host, os.getpid()))
        self.main = threading.get_ident()
        self.comms: list[weakref.ref] = []
        self.returned: dict[int, tuple[float, dict]] = {}  # rank -> (seen at, its seqs)
        self.all_returned = threading.Event()
        if self.size == 1:
            self.all_returned.set()
        self.done_at: float | None = None
        self._sends: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="tilepy-mpi-watchdog")
        self._thread.start()

    def register(self, comm) -> None:
        self.comms.append(weakref.ref(comm))

    def _live(self) -> list:
        return [c for c in (ref() for ref in list(self.comms)) if c is not None]

    # ----- the main thread at the end of launch
    def finish(self) -> None:
        """This rank returned: tell the others, then wait until they all have (the
        watchdog fails the job if they do not within `timeout`)."""
        seqs = {c.cid: c._ncalls for c in self._live()}
        self.done_at = time.monotonic()
        if not self.talk:
            return
        for q in range(self.size):
            if q != self.rank:
                self._sends.append(self.ctrl.isend(seqs, dest=q, tag=TAG_DONE))
        while not self.all_returned.wait(0.1):
            pass

    def gather(self, result) -> list:
        """Every rank's result (pickled), once all ranks returned; stops the watchdog.
        Without MPI_THREAD_MULTIPLE no rank says it returned: the watchdog then watches
        this gather, where the ranks that returned wait for the others."""
        if self.talk:
            self._close()
        results = self.ctrl.allgather(result)
        if not self.talk:
            self._close()
        self.group.Free()
        self.ctrl.Free()
        return results

    def _close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.MPI.Request.Waitall(self._sends)

    # ----- the watchdog thread
    def _run(self) -> None:
        try:
            while not self._stop.wait(POLL):
                now = time.monotonic()
                if self.talk and self._may_serve(now):
                    self._serve()
                exc = self._check(now)
                if exc is not None:
                    self.on_error(exc)
                    return
        except Exception as exc:  # noqa: BLE001 - a broken watchdog must not hang the job
            self.on_error(exc)

    def _may_serve(self, now: float) -> bool:
        """Whether to look for messages now: not while the main thread is in a short MPI
        call (MPI calls from two threads contend for the library's lock: small allreduces
        were measurably slower when the watchdog probed during them), but when it
        computes, has returned, or has waited SERVE_AFTER in a call."""
        for comm in self._live():
            armed = comm._armed
            if armed is not None and now - armed[0] < SERVE_AFTER:
                return False
        return True

    def _serve(self) -> None:
        """Answer queries and note the ranks that returned."""
        MPI, st = self.MPI, self.MPI.Status()
        while self.ctrl.Iprobe(MPI.ANY_SOURCE, TAG_QUERY, st):
            src = st.Get_source()
            self.ctrl.recv(source=src, tag=TAG_QUERY)
            self._sends.append(self.ctrl.isend(self.state(), dest=src, tag=TAG_STATE))
        while self.ctrl.Iprobe(MPI.ANY_SOURCE, TAG_DONE, st):
            src = st.Get_source()
            self.returned[src] = (time.monotonic(), self.ctrl.recv(source=src, tag=TAG_DONE))
            if len(self.returned) == self.size - 1:
                self.all_returned.set()

    def state(self) -> stall.RankState:
        """Where this rank is now."""
        comms = self._live()
        seqs = {c.cid: c._ncalls for c in comms}
        if self.done_at is not None:
            return stall.RankState(self.rank, stall.RETURNED, seqs)
        api = next((c._api for c in comms if c._api is not None), None)
        if api is not None:
            return stall.in_call(self.rank, api, seqs)
        return stall.computing(self.rank, thread_site(self.main), seqs)

    def _check(self, now: float):
        """The error that ends the job now, or None."""
        for comm in self._live():
            armed = comm._armed
            if armed is None:
                continue
            start, peers = armed
            peers = comm.world_ranks if peers is None else peers
            if now - start < min(GONE_GRACE, self.timeout):
                continue
            gone = [q for q in peers if q in self.returned
                    and now - self.returned[q][0] >= GONE_GRACE]
            dead = self._dead(peers)
            if gone or dead or now - start >= self.timeout:
                return self._call_error(comm, peers, gone, dead)
        if self.done_at is not None and not self.all_returned.is_set():
            late = [q for q in range(self.size) if q != self.rank and q not in self.returned]
            if self._dead(late) or now - self.done_at >= self.timeout:
                states = self._query(late)
                done = [self.rank, *self.returned]
                return stall.end_timeout_error(done, [states[q] for q in late if q in states],
                                               self.timeout, None if self.talk else BLIND)
        return None

    def _call_error(self, comm, peers, gone, dead):
        call = comm._api or Call("a communication call", comm.cid, 0, None, None)
        peer = peers[0] if len(peers) == 1 else None
        members = comm.world_ranks
        if gone:
            states = {q: stall.RankState(q, stall.RETURNED, self.returned[q][1]) for q in gone}
            return stall.returned_error(self.rank, call, members, states, gone[0])
        if dead:
            return stall.died_error(self.rank, call, [
                stall.RankState(q, stall.DEAD, {}, detail=self._proc(q)) for q in dead])
        states = self._query([q for q in members if q != self.rank])
        return stall.timeout_error(self.rank, call, members, states, self.timeout, peer,
                                   None if self.talk else BLIND)

    def _query(self, ranks) -> dict:
        """The states of `ranks`, asked for; SILENT or DEAD for those that do not answer
        (without MPI_THREAD_MULTIPLE none is asked: only DEAD ones are known)."""
        got = {}
        if self.talk:
            MPI, st = self.MPI, self.MPI.Status()
            for q in ranks:
                self._sends.append(self.ctrl.isend(None, dest=q, tag=TAG_QUERY))
            end = time.monotonic() + ANSWER_WAIT
            while len(got) < len(ranks) and time.monotonic() < end:
                self._serve()  # others may be asking at the same time
                if self.ctrl.Iprobe(MPI.ANY_SOURCE, TAG_STATE, st):
                    src = st.Get_source()
                    got[src] = self.ctrl.recv(source=src, tag=TAG_STATE)
                else:
                    time.sleep(0.005)
        dead = set(self._dead(ranks))
        for q in ranks:
            if q in dead:
                got[q] = stall.RankState(q, stall.DEAD, {}, detail=self._proc(q))
            elif q not in got and self.talk:
                got[q] = stall.RankState(q, stall.SILENT, {})
        return got

    def _proc(self, q: int) -> str:
        host, pid = self.procs[q]
        return f"(pid {pid} on {host})"

    def _dead(self, ranks) -> list[int]:
        """The ranks whose process has ended (seen only for processes on this host)."""
        return [q for q in ranks if q != self.rank and self.procs[q][0] == self.host
                and not _alive(self.procs[q][1])]


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return True
