"""tilepy.parallel: communicators, collective algorithms with a specified order, topology,
cost model, compression and overlap. Works on numpy arrays; does not depend on the IR.
"""

from tilepy.parallel.algorithms import ALLREDUCE
from tilepy.parallel.comm import Communicator, Request
from tilepy.parallel.errors import (
    BackendUnavailableError,
    CollectiveMismatchError,
    CommAbortedError,
    CommArgumentError,
    CommError,
    CommTimeoutError,
    RankExitedError,
    RankFailedError,
)
from tilepy.parallel.launch import detect_backend, launch
from tilepy.parallel.ops import OPS

ALGORITHMS = tuple(ALLREDUCE)

__all__ = [
    "ALGORITHMS", "OPS", "BackendUnavailableError", "CollectiveMismatchError",
    "CommAbortedError", "CommArgumentError", "CommError", "CommTimeoutError", "Communicator",
    "RankExitedError", "RankFailedError", "Request", "detect_backend", "launch",
]
