"""`launch(fn, world_size)`: run `fn(comm)` on every rank and return the results in order.

Under an MPI launcher (PMI_RANK, OMPI_COMM_WORLD_RANK or PMIX_RANK set) it runs this
process's rank on the `mpi` backend; otherwise it starts `world_size` local ranks. The same
program therefore runs unchanged in a REPL and under `mpiexec -n N`.
"""

from __future__ import annotations

import os

from tilepy.parallel.errors import CommArgumentError

LAUNCHER_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
DEFAULT_TIMEOUT = float(os.environ.get("TILEPY_COMM_TIMEOUT", "120"))


def detect_backend() -> str:
    """'mpi' when started by an MPI launcher, else 'local'."""
    return "mpi" if any(v in os.environ for v in LAUNCHER_VARS) else "local"


def launch(fn, world_size: int | None = None, *args, backend: str | None = None,
           timeout: float | None = None, debug: bool | None = None,
           node_size: int | None = None, return_exceptions: bool = False, **kwargs):
    """Call fn(comm, *args, **kwargs) on every rank; return the ranks' results in rank order.

    backend: 'local' (default outside mpiexec) or 'mpi' (default under mpiexec).
    timeout: seconds a rank may wait for a peer before the job fails (never a hang).
    debug: check on every collective that all ranks made the same call (default from
    TILEPY_COMM_DEBUG). node_size: ranks per node for hierarchical algorithms.
    """
    backend = backend or detect_backend()
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
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
