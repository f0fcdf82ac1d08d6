"""The `mpi` backend: one rank per process under mpiexec, through mpi4py (imported lazily).
Point-to-point calls move raw bytes (ml_dtypes arrays travel as they are); every blocking
MPI call runs under the launch's watchdog (watchdog.py), which fails the job instead of
letting it hang. The `native` algorithm calls MPI's own collectives (user-defined ops for
narrow floats).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np

from tilepy.parallel.comm import Communicator, _public
from tilepy.parallel.errors import BackendUnavailableError, CommArgumentError, CommError
from tilepy.parallel.ops import combine
from tilepy.parallel.watchdog import Watchdog

_U8 = np.dtype(np.uint8)


def import_mpi():
    """mpi4py's MPI module, or a clear error saying how to install it.

    With more ranks than cores (PMI_SIZE from the launcher), MPICH's busy-wait loops starve
    each other; unless the user chose otherwise, let them yield (docs/perf-log.md). Read
    by MPI_Init, so set it first.
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

    def __init__(self, mcomm, dog: Watchdog, debug: bool, node_size: int, cid: str = "world"):
        MPI = dog.MPI
        group = mcomm.Get_group()
        world_ranks = MPI.Group.Translate_ranks(group, list(range(mcomm.Get_size())), dog.group)
        group.Free()
        super().__init__(mcomm.Get_rank(), mcomm.Get_size(), dog.timeout, debug, node_size,
                         cid, world_ranks)
        self.MPI, self.mcomm, self.dog = MPI, mcomm, dog
        self._ops: dict = {}
        self._armed: tuple | None = None  # (since, world ranks waited for or None: all)
        self._splits = 0
        dog.register(self)

    # ----- blocking MPI calls under the watchdog (mpi4py releases the GIL in them)
    def _guarded(self, call, peers, *args):
        """Run a blocking MPI call; `peers`: the world ranks it waits for (None: all)."""
        self._armed = (time.monotonic(), peers)
        try:
            return call(*args)
        except self.MPI.Exception as exc:
            raise CommError(f"rank {self.rank}: MPI error in {self._current}: {exc}") from None
        finally:
            self._armed = None

    def _peer(self, rank: int) -> tuple[int]:
        return (self.world_ranks[rank],)

    # ----- raw point to point (bytes)
    def _send_raw(self, x, dst, tag):
        self._guarded(self.mcomm.Send, self._peer(dst), [_bytes(x), self.MPI.BYTE], dst, tag)

    def _isend_raw(self, parts, dst, tag):
        from tilepy.parallel.comm import Request
        bufs = [_bytes(p) for p in parts]
        reqs = [self.mcomm.Isend([b, self.MPI.BYTE], dst, tag) for b in bufs]
        return Request(lambda: self._guarded(self.MPI.Request.Waitall, self._peer(dst), reqs)
                       and None)

    def _recv_into(self, src, tag, count, dtype, post_send=None):
        """Receive `count` items (None: whatever was sent) from src; check the size."""
        status = self.MPI.Status()
        if count is None:
            self._guarded(self.mcomm.Probe, self._peer(src), src, tag, status)
            count = status.Get_count(self.MPI.BYTE) // dtype.itemsize
        out = np.empty(count, dtype)
        try:
            self._guarded(self.mcomm.Recv, self._peer(src), [out.view(np.uint8), self.MPI.BYTE],
                          src, tag, status)
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
            self._guarded(req.Wait, self._peer(dst))
            return out
        out = into if into is not None and into.size == count else np.empty(count, dtype)
        status = self.MPI.Status()
        try:
            self._guarded(self.mcomm.Sendrecv, self._peer(dst) + self._peer(src),
                          [_bytes(x), self.MPI.BYTE], dst, tag,
                          [out.view(np.uint8), self.MPI.BYTE], src, tag, status)
        except CommError:
            raise self._mismatch(src, count, dtype, "a longer message") from None
        if status.Get_count(self.MPI.BYTE) != out.nbytes:
            raise self._mismatch(src, count, dtype, f"{status.Get_count(self.MPI.BYTE)} bytes")
        return out

    def _make_sub(self, members, color):
        raise AssertionError("split is native on MPI")

    @_public("comm.split")
    def split(self, color, key=0):
        self._splits += 1
        c = self.MPI.UNDEFINED if color is None else int(color)
        sub = self._guarded(self.mcomm.Split, None, c, int(key))
        if sub == self.MPI.COMM_NULL:
            return None
        return MpiComm(sub, self.dog, self.debug, min(self.node_size, sub.Get_size()),
                       f"{self.cid}/{self._splits}:{c}")

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
        self._guarded(self.mcomm.Allreduce, None, self._typed(flat, mt), self._typed(out, mt), mop)
        return out

    def _native_reduce(self, flat, op, root):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty_like(flat)
        self._guarded(self.mcomm.Reduce, None, self._typed(flat, mt), self._typed(out, mt), mop,
                      root)
        return out if self.rank == root else None

    def _native_bcast(self, arr, root, shape, dtype):
        buf = arr.reshape(-1).copy() if arr is not None else np.empty(int(np.prod(shape)), dtype)
        self._guarded(self.mcomm.Bcast, None, [buf.view(np.uint8), self.MPI.BYTE], root)
        return buf

    def _native_reduce_scatter(self, flat, op, counts):
        mt, mop = self._mpi_op(op, flat.dtype)
        out = np.empty(counts[self.rank], flat.dtype)
        self._guarded(self.mcomm.Reduce_scatter, None, self._typed(flat, mt), self._typed(out, mt),
                      counts, mop)
        return out

    def _native_allgatherv(self, flat, counts):
        k = flat.dtype.itemsize
        out = np.empty(sum(counts), flat.dtype)
        nb = [c * k for c in counts]
        displs = [sum(nb[:i]) for i in range(len(nb))]
        self._guarded(self.mcomm.Allgatherv, None, [_bytes(flat), self.MPI.BYTE],
                      [out.view(np.uint8), (nb, displs), self.MPI.BYTE])
        return out

    def _native_alltoall(self, x):
        out = np.empty_like(x)
        self._guarded(self.mcomm.Alltoall, None, [_bytes(x), self.MPI.BYTE],
                      [out.reshape(-1).view(np.uint8), self.MPI.BYTE])
        return out


_BUILTIN_TYPES = {  # keyed by dtype: dtype.name is slow per call (docs/perf-log.md)
    np.dtype(k): v for k, v in {
        "float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T",
        "int32": "INT32_T", "int64": "INT64_T", "uint8": "UINT8_T", "uint16": "UINT16_T",
        "uint32": "UINT32_T", "uint64": "UINT64_T"}.items()
}
_INT_VIEW = {1: np.uint8, 2: np.uint16}


def world(dog: Watchdog, debug: bool, node_size: int | None) -> MpiComm:
    """A communicator over MPI_COMM_WORLD (a duplicate, so user MPI calls cannot interfere)."""
    w = dog.MPI.COMM_WORLD
    if node_size is None:
        node = w.Split_type(dog.MPI.COMM_TYPE_SHARED)
        node_size = node.Get_size()
        node.Free()
    return MpiComm(w.Dup(), dog, debug, node_size)


def run(fn, world_size, timeout, debug, node_size, args, kwargs):
    """Run this process's rank; on any error print it and abort the whole job. The results
    are gathered once every rank has returned (a rank that returns while others still
    wait for it in a call fails the job with RankExitedError, see watchdog.py)."""
    MPI = import_mpi()
    dog = Watchdog(MPI, timeout, lambda exc: abort(MPI, exc))
    comm = world(dog, debug, node_size)
    try:
        if world_size is not None and int(world_size) != comm.size:
            raise CommArgumentError(
                f"launch asked for world_size={world_size} but mpiexec started {comm.size} "
                "ranks", hint=f"run with mpiexec -n {world_size}, or pass world_size=None")
        result = fn(comm, *args, **kwargs)
        dog.finish()
        results = dog.gather(result)
        comm.mcomm.Free()
        return results
    except BaseException as exc:
        abort(MPI, exc)


def abort(MPI, exc: BaseException) -> None:
    """Print the error as this rank's and end every rank of the job (exit code 1)."""
    w = MPI.COMM_WORLD
    sys.stderr.write(f"tilepy.parallel: rank {w.Get_rank()} of {w.Get_size()} failed:\n")
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    time.sleep(float(os.environ.get("TILEPY_ABORT_GRACE", "0.5")))  # let other ranks print
    w.Abort(1)
    os._exit(1)  # MPICH's MPI_Abort may return before the launcher ends this process
