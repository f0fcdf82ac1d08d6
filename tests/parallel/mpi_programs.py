"""Programs that the MPI tests run unchanged on both backends (`python mpi_programs.py NAME`).

Under mpiexec, rank 0 prints the JSON of every rank's result; the tests compare it with
`tilepy.parallel.launch(PROGRAMS[NAME], p)` run locally. Nothing here is collected by pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import ml_dtypes
import numpy as np

import tilepy.parallel as tp
from tilepy.parallel import topology

DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": ml_dtypes.bfloat16}


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).view(np.uint8).tobytes()).hexdigest()[:16]


def rank_input(rank: int, n: int, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * seed + rank)
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(dtype)


def algorithms(comm):
    """Every specified algorithm in three dtypes on a count not divisible by p."""
    n = 5 * comm.size + 3
    out = {}
    for name, dt in DTYPES.items():
        x = rank_input(comm.rank, n, dt)
        for alg in tp.ALGORITHMS:
            out[f"{alg}/{name}"] = digest(comm.allreduce(x, algorithm=alg, group_size=2))
        out[f"rs/{name}"] = digest(comm.reduce_scatter(x))
    return out


def api(comm):
    """Point to point, bcast, reduce, allgather(v), alltoall, split, barrier."""
    p, r = comm.size, comm.rank
    res = {}
    if p > 1:
        req = comm.isend(np.arange(r + 2, dtype=np.int16) * (r + 1), (r + 1) % p, tag=3)
        res["ring_msg"] = comm.recv((r - 1) % p, tag=3).tolist()
        req.wait()
    res["bcast"] = comm.bcast(np.full((2, 2), 7.5) if r == p - 1 else None, root=p - 1).tolist()
    red = comm.reduce(rank_input(r, 9, np.float32), root=0)
    res["reduce"] = None if red is None else digest(red)
    res["allgatherv"] = comm.allgatherv(np.full(r + 1, r, np.int32)).tolist()
    res["alltoall"] = comm.alltoall(np.arange(p) + 10 * r).tolist()
    sub = comm.split(r % 2, key=-r)
    res["split"] = [sub.rank, sub.size, int(sub.allreduce(np.array([r]))[0])]
    comm.barrier()
    topo = topology.detect(comm)
    res["topology"] = [lv.name for lv in topo.levels] + [topo.world_size >= comm.size]
    return res


def native(comm):
    """MPI's own collectives on small inputs: only values that are exact in any order."""
    r, p = comm.rank, comm.size
    out = {}
    for name, dt in DTYPES.items():
        x = np.arange(6).astype(dt) + r
        out[name] = comm.allreduce(x, algorithm="native").astype(np.float64).tolist()
        out[name + "_max"] = comm.allreduce(x, "max", "native").astype(np.float64).tolist()
    out["rs"] = comm.reduce_scatter(np.arange(2 * p + 1, dtype=np.int64), algorithm="native")
    out["rs"] = out["rs"].tolist()
    out["ag"] = comm.allgatherv(np.full(r + 1, r), algorithm="native").tolist()
    out["bc"] = comm.bcast(np.arange(3.0) if r == 0 else None, algorithm="native").tolist()
    out["a2a"] = comm.alltoall(np.arange(p) + 10 * r, algorithm="native").tolist()
    red = comm.reduce(np.array([r + 1]), "prod", root=0, algorithm="native")
    out["red"] = None if red is None else red.tolist()
    return out


def replay(comm):
    """MPI's native allreduce and tilepy's replay of its order, on order-sensitive data."""
    tilepy_alg = os.environ["TILEPY_REPLAY_AS"]
    out = {}
    for n in (1, 7, 64, 1001, 40000):
        for name, dt in (("float32", np.float32), ("float64", np.float64)):
            x = rank_input(comm.rank, n, dt, seed=n)
            a = comm.allreduce(x, algorithm="native")
            b = comm.allreduce(x, algorithm=tilepy_alg)
            out[f"{n}/{name}"] = [digest(a), digest(b)]
    return out


def mismatch(comm):
    return comm.allreduce(np.ones(4 + (comm.rank == 1)))


def order(comm):
    if comm.rank == 0:
        return comm.bcast(np.ones(3)).tolist()
    return comm.allreduce(np.ones(3)).tolist()


def straggler(comm):
    if comm.rank == 1:
        time.sleep(30)  # straggles
    alg = os.environ.get("TILEPY_STRAGGLER_ALG", "ring")
    return comm.allreduce(np.ones(3), algorithm=alg).tolist()  # waits for the straggler


def early(comm):
    if comm.rank == 0:
        return None
    return comm.allreduce(np.ones(3)).tolist()  # skipped by rank 0


def late(comm):
    if comm.rank == 1:
        time.sleep(30)  # returns late
    return comm.rank


def died(comm):
    if comm.rank == 1:
        os._exit(3)
    return comm.allreduce(np.ones(3)).tolist()  # waits for the dead rank


def crash(comm):
    if comm.rank == 2:
        raise RuntimeError("rank two crashed")
    return comm.allreduce(np.ones(3)).tolist()


PROGRAMS = {f.__name__: f for f in (algorithms, api, native, replay, mismatch, order,
                                    straggler, crash, early, late, died)}

if __name__ == "__main__":
    results = tp.launch(PROGRAMS[sys.argv[1]])
    if tp.detect_backend() == "local" or int(os.environ.get("PMI_RANK", "0")) == 0:
        print("RESULT " + json.dumps(results), flush=True)
