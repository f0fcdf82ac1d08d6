"""The table of collective algorithms: name -> function over a Group and a flat array.

Every entry is written only against point-to-point calls, so it gives the same bits on
every backend. Entries may return an array that was sent (see PRIVATE_RESULT).
"native" (MPI's own collectives) is not here: only the MPI backend has it.
"""

from __future__ import annotations

from tilepy.parallel import doubling, hierarchical, ring, tree
from tilepy.parallel.errors import CommArgumentError

ALLREDUCE = {
    "ring": lambda g, x, op, **kw: ring.allreduce(g, x, op, out=kw.get("out")),
    "recursive_doubling": lambda g, x, op, **kw: doubling.recursive_doubling(g, x, op),
    "tree": lambda g, x, op, **kw: tree.allreduce(g, x, op),
    "rabenseifner": lambda g, x, op, **kw: doubling.rabenseifner(g, x, op),
    "hierarchical": lambda g, x, op, **kw: hierarchical.allreduce(g, x, op, kw["group_size"]),
    # The replay of MPICH's ring (chunk sizes ceil(n/p)); see replay.py.
    "mpich_ring": lambda g, x, op, **kw: ring.allreduce(g, x, op, "ceil", out=kw.get("out")),
}

NATIVE = "native"
# Algorithms whose result array is private to the rank (never sent). The others may
# return an array that a peer still reads (local backend): the communicator copies those.
PRIVATE_RESULT = {"ring", "mpich_ring", NATIVE}


def check_algorithm(name: str, table: dict, native_ok: bool) -> str:
    """Return `name` if this backend can run it, else raise listing the ones it can."""
    if name in table or (native_ok and name == NATIVE):
        return name
    known = list(table) + ([NATIVE] if native_ok else [])
    hint = f"use one of {', '.join(known)}"
    if name == NATIVE:
        hint = "'native' needs the mpi backend (run under mpiexec); " + hint
    raise CommArgumentError(f"unknown algorithm {name!r}", hint=hint)
