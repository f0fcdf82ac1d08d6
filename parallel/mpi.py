"""The `mpi` backend: one rank per process under mpiexec, through mpi4py (imported lazily).

Point-to-point calls move raw bytes (so ml_dtypes arrays travel as they are) and wait by
polling with a deadline, so a missing peer gives `CommTimeoutError`, never a hang. The
`native` algorithm calls MPI's own collectives (user-defined ops for narrow floats).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import traceback

import numpy as np

from tilepy.parallel.comm import Communicator
from tilepy.parallel.errors import BackendUnavailableError, CommArgumentError, CommTimeoutError
from tilepy.parallel.ops import combine

_U8 = np.dtype(np.uint8)


def import_mpi():
    """mpi4py's MPI module, or a clear error saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise BackendUnavailableError(
            "the mpi backend needs mpi4py", hint="pip install 'tilepy-runtime[mpi]'") from exc
    return MPI


def _bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


class MpiComm(Communicator):
    backend = "mpi"
    native_ok = True

    def __init__(self, mcomm, timeout: float, debug: bool, node_size: int):
        super().__init__(mcomm.Get_rank(), mcomm.Get_size(), timeout, debug, node_size)
        self.MPI = import_mpi()
        self.mcomm = mcomm
        self._ops: dict = {}

    # ----- waiting with a deadline
    def _wait(self, reqs, peer) -> None:
        MPI = self.MPI
        if MPI.Request.Testall(reqs):
            return
        deadline, spins = time.monotonic() + self.timeout, 0
        while not MPI.Request.Testall(reqs):
            spins += 1
            time.sleep(0 if spins < 2000 else 1e-4)
            if spins % 64 == 0 and time.monotonic() > deadline:
                raise self._timeout(peer)

    def _timeout(self, peer) -> CommTimeoutError:
        who = "the other ranks" if peer is None else f"rank {peer}"
        return CommTimeoutError(
            f"rank {self.rank} waited {self.timeout:g} s for {who} in {self._current}",
            hint="a rank is stuck or called a different collective")

    def _probe(self, src, tag) -> int:
        status = self.MPI.Status()
        deadline, spins = time.monotonic() + self.timeout, 0
        while not self.mcomm.Iprobe(src, tag, status):
            spins += 1
            time.sleep(0 if spins < 2000 else 1e-4)
            if spins % 64 == 0 and time.monotonic() > deadline:
                raise self._timeout(src)
        return status.Get_count(self.MPI.BYTE)

    # ----- raw point to point
    def _isend_req(self, x, dst, tag):
        buf = _bytes(x)
        return self.mcomm.Isend([buf, self.MPI.BYTE], dst, tag), buf

    def _send_raw(self, x, dst, tag):
        req, _buf = self._isend_req(x, dst, tag)
        self._wait([req], dst)

    def _isend_raw(self, parts, dst, tag):
        from tilepy.parallel.comm import Request
        reqs = [self._isend_req(p, dst, tag) for p in parts]
        return Request(lambda: self._wait([r for r, _ in reqs], dst))

    def _recv_raw(self, src, tag, count, dtype):
        dtype = np.dtype(dtype)
        nbytes = self._probe(src, tag)
        want = nbytes if count is None else count * dtype.itemsize
        if nbytes != want or nbytes % dtype.itemsize:
            raise self._mismatch(src, count, dtype, f"{nbytes} bytes")
        out = np.empty(nbytes // dtype.itemsize, dtype)
        req = self.mcomm.Irecv([out.view(np.uint8), self.MPI.BYTE], src, tag)
        self._wait([req], src)
        return out

    def _sendrecv_raw(self, x, dst, src, tag, count, dtype):
        req, _buf = self._isend_req(x, dst, tag)
        out = self._recv_raw(src, tag, count, dtype)
        self._wait([req], dst)
        return out

    def _make_sub(self, members, color):
        raise AssertionError("split is native on MPI")

    def split(self, color, key=0):
        sub = self.mcomm.Split(self.MPI.UNDEFINED if color is None else int(color), int(key))
        if sub == self.MPI.COMM_NULL:
            return None
        return MpiComm(sub, self.timeout, self.debug, min(self.node_size, sub.Get_size()))

    # ----- native collectives: MPI's blocking calls (their algorithm selection and CVARs),
    # guarded by a watchdog that aborts the job after `timeout` instead of hanging.
    def _guarded(self, call, *args):
        def expire():
            abort(self, self._timeout(None))

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            call(*args)
        finally:
            timer.cancel()

    def _mpi_op(self, op: str, dtype: np.dtype):
        """(MPI datatype, MPI op) for a numpy dtype; narrow floats get a user op."""
        MPI = self.MPI
        builtin = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
        mt = _BUILTIN_TYPES.get(dtype.name)
        if mt is not None:
            return getattr(MPI, mt), builtin
        key = (op, dtype.name)
        if key not in self._ops:
            def fn(inbuf, inoutbuf, _datatype, dt=dtype):
                a = np.frombuffer(inbuf, dtype=dt)
                b = np.frombuffer(inoutbuf, dtype=dt)
                combine(a, b, op, out=b)
            self._ops[key] = MPI.Op.Create(fn, commute=True)
        mt = {1: MPI.UINT8_T, 2: MPI.UINT16_T}[dtype.itemsize]
        return mt, self._ops[key]

    def _typed(self, x, mt):
        return [x.view(_INT_VIEW[x.dtype.itemsize]) if x.dtype.name not in _BUILTIN_TYPES
                else x, mt]

    def _native_allreduce(self, flat, op):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty_like(flat)
        self._guarded(self.mcomm.Allreduce, self._typed(flat, mt), self._typed(out, mt), mop)
        return out

    def _native_reduce(self, flat, op, root):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty_like(flat)
        self._guarded(self.mcomm.Reduce, self._typed(flat, mt), self._typed(out, mt), mop, root)
        return out if self.rank == root else None

    def _native_bcast(self, arr, root, shape, dtype):
        buf = arr.reshape(-1).copy() if arr is not None else np.empty(int(np.prod(shape)), dtype)
        self._guarded(self.mcomm.Bcast, [buf.view(np.uint8), self.MPI.BYTE], root)
        return buf

    def _native_reduce_scatter(self, flat, op, counts):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty(counts[self.rank], flat.dtype)
        self._guarded(self.mcomm.Reduce_scatter, self._typed(flat, mt), self._typed(out, mt),
                      counts, mop)
        return out

    def _native_allgatherv(self, flat, counts):
        k = flat.dtype.itemsize
        out = np.empty(sum(counts), flat.dtype)
        nb = [c * k for c in counts]
        displs = [sum(nb[:i]) for i in range(len(nb))]
        self._guarded(self.mcomm.Allgatherv, [_bytes(flat), self.MPI.BYTE],
                      [out.view(np.uint8), (nb, displs), self.MPI.BYTE])
        return out

    def _native_alltoall(self, x):
        out = np.empty_like(x)
        self._guarded(self.mcomm.Alltoall, [_bytes(x), self.MPI.BYTE],
                      [out.reshape(-1).view(np.uint8), self.MPI.BYTE])
        return out


_BUILTIN_TYPES = {
    "float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T",
    "int32": "INT32_T", "int64": "INT64_T", "uint8": "UINT8_T", "uint16": "UINT16_T",
    "uint32": "UINT32_T", "uint64": "UINT64_T",
}
_INT_VIEW = {1: np.uint8, 2: np.uint16}


def world(timeout: float, debug: bool, node_size: int | None) -> MpiComm:
    """A communicator over MPI_COMM_WORLD (a duplicate, so user MPI calls cannot interfere)."""
    MPI = import_mpi()
    w = MPI.COMM_WORLD
    if node_size is None:
        node = w.Split_type(MPI.COMM_TYPE_SHARED)
        node_size = node.Get_size()
        node.Free()
    return MpiComm(w.Dup(), timeout, debug, node_size)


def run(fn, world_size, timeout, debug, node_size, args, kwargs):
    """Run this process's rank; on any error print it and abort the whole job."""
    comm = world(timeout, debug, node_size)
    try:
        if world_size is not None and int(world_size) != comm.size:
            raise CommArgumentError(
                f"launch asked for world_size={world_size} but mpiexec started {comm.size} "
                "ranks", hint=f"run with mpiexec -n {world_size}, or pass world_size=None")
        result = fn(comm, *args, **kwargs)
        blob = np.frombuffer(pickle.dumps(result), np.uint8).copy()
        gathered = comm.allgatherv(blob)
        counts = comm.allgather(np.array([blob.size], np.int64)).reshape(-1)
        offs = np.concatenate([[0], np.cumsum(counts)])
        return [pickle.loads(gathered[offs[i]:offs[i + 1]].tobytes()) for i in range(comm.size)]
    except BaseException as exc:
        abort(comm, exc)


def abort(comm: MpiComm, exc: BaseException) -> None:
    """Print the error as this rank's and end every rank of the job (exit code 1)."""
    sys.stderr.write(f"tilepy.parallel: rank {comm.rank} of {comm.size} failed:\n")
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    time.sleep(float(os.environ.get("TILEPY_ABORT_GRACE", "0.5")))  # let other ranks print
    comm.MPI.COMM_WORLD.Abort(1)
