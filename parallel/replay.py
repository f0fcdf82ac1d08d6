"""Replays of MPICH's allreduce orders with tilepy's specified algorithms: MPICH's algorithm
(as forced by MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM, or its default on one node) maps to the
tilepy algorithm with the same per-element order, checked bit for bit against MPICH under
mpiexec (tests/parallel/test_mpi.py). MPICH's ring cuts chunks of ceil(n/p) elements
(chunk c starts at rank c+1), hence tilepy's `mpich_ring`.
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel import spec
from tilepy.parallel.errors import CommArgumentError

MPICH_TO_TILEPY = {
    "recursive_doubling": "recursive_doubling",
    "reduce_scatter_allgather": "rabenseifner",
    "ring": "mpich_ring",
    # on one node MPICH's default order equals recursive doubling at every size checked
    # (MPICH 5.0.2, p = 4, 1..40000 elements; tests/parallel/test_mpi.py checks p = 4)
    "default": "recursive_doubling",
}


def tilepy_algorithm(mpich_algorithm: str) -> str:
    """The tilepy algorithm whose bits equal MPICH's `mpich_algorithm`."""
    try:
        return MPICH_TO_TILEPY[mpich_algorithm]
    except KeyError:
        raise CommArgumentError(
            f"no replay for MPICH algorithm {mpich_algorithm!r}",
            hint=f"replayed: {', '.join(MPICH_TO_TILEPY)}") from None


def mpich_allreduce(xs: list[np.ndarray], mpich_algorithm: str = "default",
                    op: str = "sum") -> np.ndarray:
    """What MPICH's allreduce returns for the ranks' inputs `xs`, computed in one process."""
    return spec.expected(xs, tilepy_algorithm(mpich_algorithm), op)
