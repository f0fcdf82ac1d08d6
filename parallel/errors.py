"""Errors of the communication layer: every failure a rank can see is a `CommError`.

Messages name the rank(s), the collective and its call number, and what differed, so that
the same mistake reads the same on every rank. No internal function name appears in them.
"""

from __future__ import annotations

from tilepy.precision.errors import TilepyError


class CommError(TilepyError):
    """Base of every communication error."""


class CommArgumentError(CommError):
    """A bad argument to a communication call (unknown op or algorithm, wrong shape...)."""


class CollectiveMismatchError(CommError):
    """Ranks called collectives that do not match (order, shape, dtype, op or root)."""


class CommTimeoutError(CommError):
    """A rank waited longer than the communicator's timeout for a peer."""


class RankExitedError(CommError):
    """A peer finished its program while this rank still waited for a message from it."""


class CommAbortedError(CommError):
    """Another rank failed; this rank stops instead of waiting forever."""


class BackendUnavailableError(CommError):
    """The requested backend cannot run here (e.g. mpi4py is not installed)."""


class RankFailedError(CommError):
    """A rank of the local backend ended with SystemExit (`sys.exit()`) or another exit
    that is not an Exception: ranks are threads, so `launch` raises this instead of ending
    the caller's process."""
