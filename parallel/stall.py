"""Explaining a stalled rank: what every rank is doing (`RankState`) and the errors naming the
ranks a waiting rank waits for, where they are instead, and the setting to change. Both
backends describe their ranks with `RankState` (local: from its threads; mpi: from the
ranks' answers to a query) and raise the errors built here, so a stall reads the same on
both. Ranks are the launch's (world) ranks.
"""

from __future__ import annotations

from typing import NamedTuple

from tilepy.parallel.errors import CommTimeoutError, RankExitedError
from tilepy.parallel.sites import Call, Site
from tilepy.precision.errors import Loc

IN_CALL, COMPUTING, RETURNED, FAILED, SILENT, DEAD = (
    "in a call", "computing", "returned", "failed", "silent", "dead")

TIMEOUT_SETTING = "launch(..., timeout=SECONDS) or TILEPY_COMM_TIMEOUT=SECONDS"
ORDER_HINT = ("the ranks are in different calls: every rank must make the same collective "
              "calls in the same order (launch with debug=True to compare them)")


class RankState(NamedTuple):
    """One rank's state: `kind`, and for IN_CALL the call (text, communicator, collective
    number) and its site; for COMPUTING where it is now (`loc`, `func`). `seqs` counts the
    collectives the rank has begun on each communicator. Picklable (sent between ranks)."""

    rank: int
    kind: str
    seqs: dict
    call: str | None = None
    comm: str | None = None
    seq: int = 0
    loc: Loc | None = None
    func: str | None = None
    detail: str | None = None

    def text(self) -> str:
        """'rank 1 is computing at prog.py:8 (in step)', 'rank 2 is in comm.bcast ...'."""
        r = f"rank {self.rank}"
        at = f" at {self.loc}" if self.loc is not None and self.loc.line else ""
        if self.kind == IN_CALL:
            return f"{r} is in {self.call}{at}"
        if self.kind == COMPUTING:
            return f"{r} is computing{at}" + (f" (in {self.func})" if at and self.func else "")
        if self.kind == RETURNED:
            return f"{r} has returned from its function"
        if self.kind == FAILED:
            return f"{r} failed" + (f" with {self.detail}" if self.detail else "")
        if self.kind == DEAD:
            return f"{r}'s process {self.detail} ended without a message (os._exit, a " \
                   "signal, or a crash in native code)"
        return f"{r} did not answer (a crash, or native code holding the GIL)"


def in_call(rank: int, call: Call, seqs: dict) -> RankState:
    return RankState(rank, IN_CALL, seqs, call.describe(), call.comm, call.seq, call.loc())


def computing(rank: int, site: Site | None, seqs: dict) -> RankState:
    if site is None:
        return RankState(rank, COMPUTING, seqs)
    return RankState(rank, COMPUTING, seqs, loc=site.loc(), func=site.code.co_name)


def ranks(rs) -> str:
    """'rank 1', 'ranks 0 and 2', 'ranks 0, 2 and 3'."""
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"


def sort_out(me: int, call: Call, members, states: dict) -> tuple[list[int], list[RankState]]:
    """(ranks that are in `call` with `me`, states of the ranks it waits for): for a
    collective, the members that have not begun it (those that began and left it are not
    waited for); for a point-to-point call, its peer."""
    if not call.seq:
        peer = states.get(call.peer)
        return [me], [peer] if peer is not None else []
    here, missing = [me], []
    for q in members:
        st = states.get(q)
        if q == me or st is None:
            continue
        if st.kind == IN_CALL and st.comm == call.comm and st.seq == call.seq:
            here.append(q)
        elif st.seqs.get(call.comm, 0) < call.seq:
            missing.append(st)
    return here, missing


def timeout_error(me: int, call: Call, members, states: dict, timeout: float,
                  peer: int | None = None, note: str | None = None) -> CommTimeoutError:
    """`me` waited `timeout` in `call`: name the ranks that did not arrive and where they are
    (ranks without a state are left out; `note` says why)."""
    here, missing = sort_out(me, call, members, states)
    if not missing and peer is not None and peer in states:
        missing = [states[peer]]
    what = call.describe()
    if not missing:
        msg = f"rank {me} waited {timeout:g} s in {what}"
    elif call.seq:
        late = ranks(s.rank for s in missing)
        them = "it" if len(missing) == 1 else "them"
        msg = (f"{late} did not reach {what} within {timeout:g} s: {ranks(here)} "
               f"{'waits' if len(here) == 1 else 'wait'} there for {them}")
    else:
        msg = f"rank {me} waited {timeout:g} s in {what} for rank {missing[0].rank}"
    if missing:
        msg += ". " + "; ".join(s.text() for s in missing)
    if note:
        msg += ". " + note
    late = ranks(s.rank for s in missing) if missing else "a rank"
    hint = (f"the timeout ({timeout:g} s) bounds how long a rank waits in a call for the "
            f"others, not how long a rank computes; if {late} legitimately needs longer, "
            f"raise it: {TIMEOUT_SETTING}")
    if any(s.kind == IN_CALL for s in missing):
        hint = ORDER_HINT + "; " + hint
    return CommTimeoutError(msg, loc=call.loc(), hint=hint)


def returned_error(me: int, call: Call, members, states: dict,
                   peer: int | None = None) -> RankExitedError:
    """Ranks that `call` waits for have returned from their function."""
    here, missing = sort_out(me, call, members, states)
    gone = [s.rank for s in missing if s.kind == RETURNED]
    if not gone and peer is not None:
        gone = [peer]
    what = call.describe()
    msg = (f"{ranks(gone)} returned from {'its' if len(gone) == 1 else 'their'} function "
           f"without making {what}, where {ranks(here)} "
           f"{'waits' if len(here) == 1 else 'wait'} for {'it' if len(gone) == 1 else 'them'}")
    return RankExitedError(
        msg, loc=call.loc(),
        hint=f"every rank must make the same collective calls in the same order: "
             f"{ranks(gone)} returned before this one (an early return, or a branch on "
             f"the rank?)")


def died_error(me: int, call: Call, dead: list[RankState]) -> RankExitedError:
    """The processes of ranks that `call` waits for have ended (mpi backend)."""
    return RankExitedError(
        "; ".join(s.text() for s in dead) + f", while rank {me} waits in {call.describe()}",
        loc=call.loc(),
        hint="`python -X faulthandler` prints where a crash happens; `mpiexec "
             "-print-all-exitcodes` prints every rank's exit code")


def end_timeout_error(done, states: list[RankState], timeout: float,
                      note: str | None = None) -> CommTimeoutError:
    """Ranks `done` returned and waited `timeout` for the others (`states`, or unknown with
    a `note` saying why) to return."""
    late = ranks(s.rank for s in states) if states else "the other ranks"
    first = next((s.loc for s in states if s.loc is not None), None)
    if states:
        msg = f"{late} did not return within {timeout:g} s after {ranks(done)} returned. " \
            + "; ".join(s.text() for s in states)
    else:
        msg = f"{ranks(done)} returned and waited {timeout:g} s for {late}"
    if note:
        msg += ". " + note
    return CommTimeoutError(
        msg, loc=first,
        hint=f"the end of launch is a collective: the timeout ({timeout:g} s) bounds how "
             f"long the ranks that returned wait for the others; if {late} legitimately "
             f"needs longer, raise it: {TIMEOUT_SETTING}")


def summary(states: list[RankState]) -> str:
    """One line per rank (for an interrupted launch)."""
    return "\n".join(s.text() for s in states)
