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
from tilepy.parallel.errors import (
    BackendUnavailableError,
    CommArgumentError,
    CommError,
    CommTimeoutError,
)
from tilepy.parallel.ops import combine

_U8 = np.dtype(np.uint8)


def import_mpi():
    """mpi4py's MPI module, or a clear error saying how to install it.

    With more ranks than cores (PMI_SIZE from the launcher), MPICH's busy-wait loops starve
    each other; unless the user chose otherwise, let them yield (measured here at 4 ranks
    on 2 cores: 3.3 ms -> 0.9 ms per small allreduce). Read by MPI_Init, so set it first.
    """
    size = int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 0)
    if size > (os.cpu_count() or 1):
        os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
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
    receives_into = True

    def __init__(self, mcomm, timeout: float, debug: bool, node_size: int):
        super().__init__(mcomm.Get_rank(), mcomm.Get_size(), timeout, debug, node_size)
        self.MPI = import_mpi()
        self.mcomm = mcomm
        self._ops: dict = {}
        self._watch = _Watchdog(lambda: abort(self, self._timeout(None)))

    # ----- blocking MPI calls under the watchdog (a missing peer aborts the job after
    # `timeout` with CommTimeoutError instead of hanging; mpi4py releases the GIL in them)
    def _guarded(self, call, *args):
        self._watch.arm(self.timeout)
        try:
            return call(*args)
        except self.MPI.Exception as exc:
            raise CommError(f"rank {self.rank}: MPI error in {self._current}: {exc}") from None
        finally:
            self._watch.disarm()

    def _timeout(self, peer) -> CommTimeoutError:
        who = "the other ranks" if peer is None else f"rank {peer}"
        return CommTimeoutError(
            f"rank {self.rank} waited {self.timeout:g} s for {who} in {self._current}",
            hint="a rank is stuck or called a different collective")

    # ----- raw point to point (bytes)
    def _send_raw(self, x, dst, tag):
        self._guarded(self.mcomm.Send, [_bytes(x), self.MPI.BYTE], dst, tag)

    def _isend_raw(self, parts, dst, tag):
        from tilepy.parallel.comm import Request
        bufs = [_bytes(p) for p in parts]
        reqs = [self.mcomm.Isend([b, self.MPI.BYTE], dst, tag) for b in bufs]
        return Request(lambda: self._guarded(self.MPI.Request.Waitall, reqs) and None)

    def _recv_into(self, src, tag, count, dtype, post_send=None):
        """Receive `count` items (None: whatever was sent) from src; check the size."""
        status = self.MPI.Status()
        if count is None:
            self._guarded(self.mcomm.Probe, src, tag, status)
            count = status.Get_count(self.MPI.BYTE) // dtype.itemsize
        out = np.empty(count, dtype)
        try:
            self._guarded(self.mcomm.Recv, [out.view(np.uint8), self.MPI.BYTE], src, tag,
                          status)
        except CommError:
            raise self._mismatch(src, count, dtype, "a longer message") from None
        got = status.Get_count(self.MPI.BYTE)
        if got != out.nbytes:
            raise self._mismatch(src, count, dtype, f"{got} bytes")
        return out

    def _recv_raw(self, src, tag, count, dtype):
        return self._recv_into(src, tag, count, np.dtype(dtype))

    def _sendrecv_raw(self, x, dst, src, tag, count, dtype, into=None):
        dtype = np.dtype(dtype)
        if count is None:
            req = self.mcomm.Isend([_bytes(x), self.MPI.BYTE], dst, tag)
            out = self._recv_into(src, tag, None, dtype)
            self._guarded(req.Wait)
            return out
        out = into if into is not None and into.size == count else np.empty(count, dtype)
        status = self.MPI.Status()
        try:
            self._guarded(self.mcomm.Sendrecv, [_bytes(x), self.MPI.BYTE], dst, tag,
                          [out.view(np.uint8), self.MPI.BYTE], src, tag, status)
        except CommError:
            raise self._mismatch(src, count, dtype, "a longer message") from None
        if status.Get_count(self.MPI.BYTE) != out.nbytes:
            raise self._mismatch(src, count, dtype, f"{status.Get_count(self.MPI.BYTE)} bytes")
        return out

    def _make_sub(self, members, color):
        raise AssertionError("split is native on MPI")

    def split(self, color, key=0):
        sub = self.mcomm.Split(self.MPI.UNDEFINED if color is None else int(color), int(key))
        if sub == self.MPI.COMM_NULL:
            return None
        return MpiComm(sub, self.timeout, self.debug, min(self.node_size, sub.Get_size()))

    # ----- native collectives: MPI's own blocking calls (its selection and CVARs apply)
    def _mpi_op(self, op: str, dtype: np.dtype):
        """(MPI datatype, MPI op) for a numpy dtype, cached; narrow floats get a user op."""
        key = (op, dtype)
        hit = self._ops.get(key)
        if hit is None:
            hit = self._ops[key] = self._make_op(op, dtype)
        return hit

    def _make_op(self, op: str, dtype: np.dtype):
        MPI = self.MPI
        mt = _BUILTIN_TYPES.get(dtype)
        if mt is not None:
            builtin = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
            return getattr(MPI, mt), builtin

        def fn(inbuf, inoutbuf, _datatype, dt=dtype):
            a = np.frombuffer(inbuf, dtype=dt)
            b = np.frombuffer(inoutbuf, dtype=dt)
            combine(a, b, op, out=b)

        mt = {1: MPI.UINT8_T, 2: MPI.UINT16_T}[dtype.itemsize]
        return mt, MPI.Op.Create(fn, commute=True)

    @staticmethod
    def _typed(x, mt):
        """A buffer spec; narrow floats travel as unsigned ints of the same width."""
        return [x if x.dtype in _BUILTIN_TYPES else x.view(_INT_VIEW[x.dtype.itemsize]), mt]

    def _native_allreduce(self, flat, op, out=None):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty_like(flat) if out is None else out  # MPI writes the caller's buffer
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


class _Watchdog:
    """One daemon thread per communicator, polling at 20 Hz: calls `on_expire` when a
    blocking call armed with a deadline is still running after it. Arming is one store."""

    def __init__(self, on_expire):
        self.on_expire, self.deadline = on_expire, None
        threading.Thread(target=self._run, daemon=True, name="tilepy-mpi-watchdog").start()

    def arm(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout

    def disarm(self) -> None:
        self.deadline = None

    def _run(self):
        while True:
            time.sleep(0.05)
            d = self.deadline
            if d is not None and time.monotonic() >= d:
                self.on_expire()


_BUILTIN_TYPES = {  # keyed by dtype (dtype.name is slow: ~10 us per call)
    np.dtype(k): v for k, v in {
        "float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T",
        "int32": "INT32_T", "int64": "INT64_T", "uint8": "UINT8_T", "uint16": "UINT16_T",
        "uint32": "UINT32_T", "uint64": "UINT64_T"}.items()
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
