"""`launch(fn, world_size)`: run `fn(comm)` on every rank and return the results in order.

Under an MPI launcher (PMI_RANK, OMPI_COMM_WORLD_RANK or PMIX_RANK set) it runs this
process's rank on the `mpi` backend; otherwise it starts `world_size` local ranks. The same
program therefore runs unchanged in a REPL and under `mpiexec -n N`.
"""

from __future__ import annotations

import os

from tilepy.parallel.errors import CommArgumentError

LAUNCHER_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
TIMEOUT_VAR = "TILEPY_COMM_TIMEOUT"
# Seconds a rank may wait in one communication call for the other ranks (docs/parallel.md,
# "Timeout"). It bounds how much later than the others a rank may reach a call, not how
# long ranks compute: long enough for one rank's extra work (evaluating, saving or
# generating data on rank 0 in the interpreter takes minutes), short enough that a stuck
# job fails while someone still watches it.
DEFAULT_TIMEOUT = 300.0


def detect_backend() -> str:
    """'mpi' when started by an MPI launcher, else 'local'."""
    return "mpi" if any(v in os.environ for v in LAUNCHER_VARS) else "local"


def comm_timeout(timeout: float | None = None) -> float:
    """The timeout in seconds: `timeout` if given, else TILEPY_COMM_TIMEOUT, else
    DEFAULT_TIMEOUT. `inf` waits forever."""
    source = "timeout"
    if timeout is None:
        env = os.environ.get(TIMEOUT_VAR, "").strip()
        if not env:
            return DEFAULT_TIMEOUT
        timeout, source = env, f"{TIMEOUT_VAR}={env}"
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = float("nan")
    if not value > 0:  # NaN included
        raise CommArgumentError(f"{source} is not a positive number of seconds",
                                hint=f"e.g. {TIMEOUT_VAR}=600 (inf: wait forever)")
    return value


def launch(fn, world_size: int | None = None, *args, backend: str | None = None,
           timeout: float | None = None, debug: bool | None = None,
           node_size: int | None = None, return_exceptions: bool = False, **kwargs):
    """Call fn(comm, *args, **kwargs) on every rank; return the ranks' results in rank order.

    backend: 'local' (default outside mpiexec) or 'mpi' (default under mpiexec).
    timeout: seconds a rank may wait in one communication call (or, having returned, at
    the end of launch) for the other ranks before the job fails with an error naming the
    ranks that did not arrive; default TILEPY_COMM_TIMEOUT, else 300. It limits waiting,
    not computing: ranks that do the same work arrive together however long it takes.
    debug: check on every collective that all ranks made the same call (default from
    TILEPY_COMM_DEBUG). node_size: ranks per node for hierarchical algorithms.
    """
    backend = backend or detect_backend()
    timeout = comm_timeout(timeout)
    debug = os.environ.get("TILEPY_COMM_DEBUG", "") == "1" if debug is None else debug
    if backend == "local":
        from tilepy.parallel import local
        size = 1 if world_size is None else int(world_size)
        if size < 1:
            raise CommArgumentError(f"world_size must be >= 1, got {world_size}")
        return local.run(fn, size, timeout, debug, node_size, args, kwargs, return_exceptions)
    if backend == "mpi":
        from tilepy.parallel import mpi
        return mpi.run(fn, world_size, timeout, debug, node_size, args, kwargs)
    raise CommArgumentError(f"unknown backend {backend!r}", hint="use 'local' or 'mpi'")
