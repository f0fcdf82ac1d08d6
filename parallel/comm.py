"""`Communicator`, the backend-independent API: argument checks, the collective call
sequence (cross-checked in debug mode), each rank's call and user site (for errors), and
dispatch to the algorithm table. A backend supplies `_send_raw`, `_recv_raw`,
`_sendrecv_raw`, `_make_sub`, optionally `_native_*` and `_shared_allreduce`. Inputs are
never written; allreduce returns a read-only result (or writes `out=`), others new arrays.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from tilepy.parallel import ring, tree
from tilepy.parallel.algorithms import ALLREDUCE, NATIVE, PRIVATE_RESULT, check_algorithm
from tilepy.parallel.chunking import balanced
from tilepy.parallel.errors import CollectiveMismatchError, CommArgumentError
from tilepy.parallel.ops import check_op
from tilepy.parallel.sites import Call, caller_site
from tilepy.precision.errors import TilepyError
from tilepy.precision.formats import get_format

COLL_TAG = 32000  # collectives' messages (user tags must be below this)
DEBUG_TAG = 32001  # the debug mode's call-sequence check
MAX_USER_TAG = COLL_TAG - 1
MISMATCH_HINT = ("every rank must call the same collectives in the same order with the same "
                 "shapes, dtypes, ops and roots; launch with debug=True to compare the calls")


def _dtype_name(dt: np.dtype) -> str:
    return get_format(dt).name


def encode_header(x: np.ndarray) -> np.ndarray:
    """Shape and dtype of `x` as a small uint8 array (sent before data of unknown shape)."""
    meta = {"shape": list(x.shape), "dtype": _dtype_name(x.dtype)}
    return np.frombuffer(json.dumps(meta).encode(), np.uint8).copy()


def decode_header(h: np.ndarray) -> tuple[tuple[int, ...], np.dtype]:
    meta = json.loads(h.tobytes().decode())
    return tuple(meta["shape"]), get_format(meta["dtype"]).np_dtype


def _public(name: str, collective: bool = True, peer: tuple[int, str] | None = None):
    """Decorates a public call. The outermost one (not a call that another public call
    makes) records itself in `self._api` with the user's call site while it runs, counts
    the collectives per communicator, and puts that site on any TilepyError raised in it
    that has none. `peer`: (position, name) of a point-to-point call's peer argument."""

    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            if self._api is not None:
                return method(self, *args, **kwargs)
            p = None
            if peer is not None:
                p = kwargs.get(peer[1], args[peer[0]] if len(args) > peer[0] else None)
            self._enter(name, collective, p)
            try:
                return method(self, *args, **kwargs)
            except TilepyError as exc:
                _locate(exc, self._api)
                raise
            finally:
                self._api = None
        return call
    return wrap


def _locate(exc: TilepyError, call: Call | None) -> None:
    """Give `exc` the user's site of `call` unless it already names one."""
    if exc.loc.line or call is None or call.site is None:
        return
    exc.loc = call.loc()
    exc.args = (exc._format(),)


class Request:
    """A pending non-blocking operation; `wait()` returns its result (an array or None)."""

    def __init__(self, wait_fn, result=None):
        self._wait_fn, self._result, self._done = wait_fn, result, wait_fn is None

    def wait(self):
        if not self._done:
            self._result, self._done = self._wait_fn(), True
        return self._result


class Communicator:
    """A group of ranks. Subclasses set `backend` and implement the raw calls."""

    backend = "abstract"
    native_ok = False
    receives_into = False  # True when p2p_sendrecv can write a caller's buffer (copying backends)

    def __init__(self, rank: int, size: int, timeout: float, debug: bool, node_size: int,
                 cid: str = "world", world_ranks: list[int] | None = None):
        self.rank, self.size = rank, size
        self.timeout, self.debug = timeout, debug
        self.node_size = max(1, node_size)
        self.cid = cid  # the same on every rank of this communicator ("world", "world/1:0")
        self.world_ranks = list(range(size)) if world_ranks is None else list(world_ranks)
        self._seq = 0  # collectives begun, internal ones included (matches messages)
        self._ncalls = 0  # public collectives called (the numbers that errors show)
        self._api: Call | None = None  # the public call in progress
        self._call = None
        self._workspace = None
        self.topology = None  # for algorithm="auto"; see choose_algorithm

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank={self.rank} size={self.size}>"

    def _enter(self, name: str, collective: bool, peer=None) -> None:
        """Record the user's public call `name` (see `_public`)."""
        if collective:
            self._ncalls += 1
        if isinstance(peer, (int, np.integer)) and 0 <= peer < self.size:
            peer = self.world_ranks[peer]
        else:
            peer = None
        self._api = Call(name, self.cid, self._ncalls if collective else 0, peer,
                         caller_site())

    # ----- the Group surface used by algorithms (collective tag, whole 1-D arrays)
    def p2p_send(self, x, dst):
        self._send_raw(x, dst, COLL_TAG)

    def p2p_recv(self, src, count, dtype):
        return self._recv_raw(src, COLL_TAG, count, dtype)

    def p2p_sendrecv(self, x, dst, src, count, dtype, into=None):
        """`into`: a buffer the backend may receive into directly (if `receives_into`)."""
        return self._sendrecv_raw(x, dst, src, COLL_TAG, count, dtype, into)

    def _mismatch(self, src, count, dtype, got) -> CollectiveMismatchError:
        return CollectiveMismatchError(
            f"rank {self.rank} expected {count} x {dtype} from rank {src} in {self._current} "
            f"but got {got}", hint=MISMATCH_HINT)

    def workspace(self, n: int, dtype, layout: tuple) -> np.ndarray:
        """A flat buffer reused by successive ring allreduces of the same size, dtype and
        chunk layout (no page faults on every call); ring.reduce_scatter says why reuse is
        safe. Another layout gets a fresh buffer (the old one may still be read)."""
        key = (n, np.dtype(dtype).str, layout)
        if self._workspace is None or self._workspace[0] != key:
            self._workspace = (key, np.empty(n, dtype))
        return self._workspace[1]

    # ----- point to point (user tags)
    def _check_peer(self, peer: int, what: str) -> None:
        if not (isinstance(peer, (int, np.integer)) and 0 <= peer < self.size):
            raise CommArgumentError(f"{what} rank {peer!r} is not in 0..{self.size - 1}")

    def _check_tag(self, tag: int) -> None:
        if not 0 <= tag <= MAX_USER_TAG:
            raise CommArgumentError(f"tag {tag} is not in 0..{MAX_USER_TAG}")

    @_public("comm.send", False, (1, "dest"))
    def send(self, x, dest: int, tag: int = 0) -> None:
        """Send an array (any shape, numpy or ml_dtypes dtype) to `dest`."""
        self.isend(x, dest, tag).wait()

    @_public("comm.isend", False, (1, "dest"))
    def isend(self, x, dest: int, tag: int = 0) -> Request:
        self._check_peer(dest, "destination")
        self._check_tag(tag)
        x = np.array(x, copy=True, order="C")
        self._call = None
        return self._isend_raw([encode_header(x), x.reshape(-1)], dest, tag)

    @_public("comm.recv", False, (0, "source"))
    def recv(self, source: int, tag: int = 0) -> np.ndarray:
        """Receive the next array sent by `source` with `tag`."""
        return self.irecv(source, tag).wait()

    @_public("comm.irecv", False, (0, "source"))
    def irecv(self, source: int, tag: int = 0) -> Request:
        self._check_peer(source, "source")
        self._check_tag(tag)
        return Request(lambda: self._finish_irecv(source, tag))

    @_public("comm.irecv", False, (0, "source"))
    def _finish_irecv(self, source: int, tag: int) -> np.ndarray:
        """The receive of `irecv`, run by `Request.wait()` (whose line errors name)."""
        self._call = None
        shape, dtype = decode_header(self._recv_raw(source, tag, None, np.dtype(np.uint8)))
        return self._recv_raw(source, tag, int(np.prod(shape)), dtype).reshape(shape)

    @_public("comm.sendrecv", False, (2, "source"))
    def sendrecv(self, x, dest: int, source: int, tag: int = 0) -> np.ndarray:
        req = self.isend(x, dest, tag)
        out = self.recv(source, tag)
        req.wait()
        return out

    def _isend_raw(self, parts, dst, tag) -> Request:
        for part in parts:
            self._send_raw(part, dst, tag)
        return Request(None)

    # ----- collective bookkeeping
    def _begin(self, name: str, x, **attrs) -> None:
        self._seq += 1
        self._call = (self._seq, name, x, attrs)  # formatted only when a message needs it
        if self.debug and self.size > 1:
            self._check_sequence(self._call_text())

    def _call_text(self) -> str:
        _, name, x, attrs = self._call
        parts = ([_describe(x)] if x is not None else []) + [f"{k}={v}" for k, v in attrs.items()]
        return f"{name}({', '.join(parts)})"

    @property
    def _current(self) -> str:
        """The user's call in progress, as messages name it."""
        if self._api is None:
            return "a point-to-point call"
        return self._api.describe()

    def _check_sequence(self, desc: str) -> None:
        """Debug mode: every rank learns every rank's call and all raise the same error."""
        p, r = self.size, self.rank
        mine = np.frombuffer(f"#{self._seq} {desc}".encode(), np.uint8).copy()
        calls = [None] * p
        calls[r] = mine
        for s in range(p - 1):
            send_c, recv_c = (r - s) % p, (r - 1 - s) % p
            calls[recv_c] = self._sendrecv_raw(calls[send_c], (r + 1) % p, (r - 1) % p,
                                               DEBUG_TAG, None, np.dtype(np.uint8), None)
        texts = [c.tobytes().decode() for c in calls]
        if len(set(texts)) > 1:
            lines = "; ".join(f"rank {i}: {t}" for i, t in enumerate(texts))
            raise CollectiveMismatchError(
                f"ranks called different collectives: {lines}",
                hint="every rank must make the same collective call at this point")

    def _flat(self, x) -> tuple[np.ndarray, np.ndarray]:
        if x is None:
            raise CommArgumentError("this collective needs an array on every rank, got None")
        x = np.asarray(x)
        return x, np.ascontiguousarray(x).reshape(-1)

    # ----- collectives
    @_public("comm.barrier")
    def barrier(self) -> None:
        """Dissemination barrier (or MPI's own with algorithm native)."""
        self._begin("barrier", None)
        k, empty = 1, np.zeros(0, np.uint8)
        while k < self.size:
            self.p2p_sendrecv(empty, (self.rank + k) % self.size, (self.rank - k) % self.size,
                              0, empty.dtype)
            k <<= 1

    @_public("comm.bcast")
    def bcast(self, x, root: int = 0, algorithm: str = "tree") -> np.ndarray:
        """Root's array on every rank (others may pass None). Returns a new array."""
        self._check_peer(root, "root")
        check_algorithm(algorithm, {"tree": None}, self.native_ok)
        arr = np.ascontiguousarray(x) if self.rank == root else None
        self._begin("bcast", None, root=root, algorithm=algorithm)
        h = tree.bcast(self, encode_header(arr) if arr is not None else None, root, None,
                       np.dtype(np.uint8))
        shape, dtype = decode_header(h)
        if algorithm == NATIVE:
            flat = self._native_bcast(arr, root, shape, dtype)
        else:
            flat = tree.bcast(self, None if arr is None else arr.reshape(-1), root,
                              int(np.prod(shape)), dtype)
        return flat.reshape(shape).copy()

    @_public("comm.reduce")
    def reduce(self, x, op: str = "sum", root: int = 0, algorithm: str = "tree"):
        """The reduction on `root` (None on other ranks)."""
        check_op(op)
        self._check_peer(root, "root")
        check_algorithm(algorithm, {"tree": None, **ALLREDUCE}, self.native_ok)
        x, flat = self._flat(x)
        self._begin("reduce", x, op=op, root=root, algorithm=algorithm)
        if algorithm == NATIVE:
            res = self._native_reduce(flat, op, root)
        elif algorithm == "tree":
            res = tree.reduce(self, flat, op, root)
        else:
            res = self._allreduce_flat(flat, op, algorithm, None)
            res = res.copy() if self.rank == root else None
        return None if res is None else res.reshape(x.shape)

    @_public("comm.allreduce")
    def allreduce(self, x, op: str = "sum", algorithm: str = "ring", out=None,
                  group_size: int | None = None) -> np.ndarray:
        """The reduction of every rank's `x` on every rank, by a specified-order algorithm.

        Without `out`, the result is READ-ONLY (writing it raises ValueError): on the local
        backend it is one array shared by all ranks (no per-rank copy), and every backend
        returns it read-only so that a program behaves the same on all. Pass `out` (an
        array of x's shape and dtype, C-contiguous) for a private, writable copy.
        """
        check_op(op)
        x, flat = self._flat(x)
        if algorithm == "auto":
            algorithm = self.choose_algorithm(flat.nbytes)
        check_algorithm(algorithm, ALLREDUCE, self.native_ok)
        self._begin("allreduce", x, op=op, algorithm=algorithm)
        flat_out = None
        if out is not None:
            if out.shape != x.shape or out.dtype != x.dtype or not out.flags.c_contiguous:
                raise CommArgumentError(
                    f"out must be a C-contiguous {_describe(x)}, got {_describe(out)}")
            if not out.flags.writeable:
                raise CommArgumentError(f"out must be writable, got a read-only {_describe(out)}")
            flat_out = out.reshape(-1)
        res = self._shared_allreduce(flat, op, algorithm, group_size or self.node_size)
        if res is None:
            res = self._allreduce_messages(flat, op, algorithm, flat_out, group_size)
            if out is None:
                if algorithm not in PRIVATE_RESULT or res is flat:
                    res = res.copy()
                res.flags.writeable = False
        if out is None:
            return res.reshape(x.shape)
        if res is not flat_out:
            flat_out[...] = res
        return out

    def choose_algorithm(self, nbytes: int) -> str:
        """NCCL-style choice for algorithm="auto": the cheapest by the cost model on
        `self.topology` (detected on first use; assign a calibrated one to override).
        Every rank computes the same choice from the same inputs."""
        if self.topology is None:
            from tilepy.parallel.topology import detect
            self.topology = detect(self)
        from tilepy.parallel.cost import select
        return select(self.topology, self.size, nbytes)[0]

    def _allreduce_flat(self, flat, op, algorithm, out, group_size=None):
        """The flat result (possibly shared or read-only: callers that keep it copy it)."""
        res = self._shared_allreduce(flat, op, algorithm, group_size or self.node_size)
        if res is not None:
            return res
        return self._allreduce_messages(flat, op, algorithm, out, group_size)

    def _allreduce_messages(self, flat, op, algorithm, out, group_size=None):
        if algorithm == NATIVE:
            return self._native_allreduce(flat, op, out)
        return ALLREDUCE[algorithm](self, flat, op, out=out,
                                    group_size=group_size or self.node_size)

    @_public("comm.reduce_scatter")
    def reduce_scatter(self, x, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
        """Chunk `rank` (balanced chunking of the flattened x) of the reduction."""
        check_op(op)
        check_algorithm(algorithm, ALLREDUCE, self.native_ok)
        x, flat = self._flat(x)
        self._begin("reduce_scatter", x, op=op, algorithm=algorithm)
        counts = balanced(flat.size, self.size)
        if algorithm == NATIVE:
            return self._native_reduce_scatter(flat, op, counts)
        if algorithm == "ring":
            return ring.reduce_scatter(self, flat, op, counts)[self.rank].copy()
        full = self._allreduce_flat(flat, op, algorithm, None)
        return ring.split_chunks(full, counts)[self.rank].copy()

    @_public("comm.allgatherv")
    def allgatherv(self, x, counts: list[int] | None = None, algorithm: str = "ring"):
        """Every rank's flat x concatenated in rank order (x may differ in length)."""
        check_algorithm(algorithm, {"ring": None}, self.native_ok)
        x, flat = self._flat(x)
        if counts is None:
            counts = [int(c[0]) for c in self.allgather(np.array([flat.size], np.int64))]
        counts = [int(c) for c in counts]
        if len(counts) != self.size or counts[self.rank] != flat.size:
            raise CommArgumentError(
                f"counts {counts} must have {self.size} entries and entry {self.rank} must "
                f"equal this rank's size {flat.size}")
        self._begin("allgatherv", x, counts=counts, algorithm=algorithm)
        if algorithm == NATIVE:
            return self._native_allgatherv(flat, counts)
        chunks = [None] * self.size
        chunks[self.rank] = flat
        return np.concatenate(ring.allgather(self, chunks, counts, flat.dtype))

    @_public("comm.allgather")
    def allgather(self, x, algorithm: str = "ring") -> np.ndarray:
        """Every rank's x (same shape everywhere) stacked: result[i] is rank i's x."""
        x = np.asarray(x)
        flat = self.allgatherv(x, [x.size] * self.size, algorithm)
        return flat.reshape((self.size, *x.shape))

    @_public("comm.alltoall")
    def alltoall(self, x, algorithm: str = "pairwise") -> np.ndarray:
        """x has shape (size, ...): result[j] is rank j's x[rank] (pairwise exchange)."""
        check_algorithm(algorithm, {"pairwise": None}, self.native_ok)
        x = np.ascontiguousarray(x)
        if x.ndim == 0 or x.shape[0] != self.size:
            raise CommArgumentError(f"alltoall needs shape ({self.size}, ...), got {x.shape}")
        self._begin("alltoall", x, algorithm=algorithm)
        if algorithm == NATIVE:
            return self._native_alltoall(x)
        p, r = self.size, self.rank
        out = np.empty_like(x)
        out[r] = x[r]
        n = x[0].size
        for s in range(1, p):
            dst, src = (r + s) % p, (r - s) % p
            out[src] = self.p2p_sendrecv(x[dst].reshape(-1), dst, src, n,
                                         x.dtype).reshape(x.shape[1:])
        return out

    @_public("comm.split")
    def split(self, color: int | None, key: int = 0):
        """Sub-communicator of the ranks with the same color, ordered by (key, rank).

        Ranks passing color=None get None (MPI_UNDEFINED).
        """
        c = -1 if color is None else int(color)
        if c < -1 or (color is not None and c < 0):
            raise CommArgumentError(f"color must be >= 0 or None, got {color}")
        table = self.allgather(np.array([c, int(key)], np.int64))
        if color is None:
            return None
        members = sorted((int(k), i) for i, (cc, k) in enumerate(table) if cc == c)
        return self._make_sub([i for _, i in members], c)

    # ----- backend hooks
    def _shared_allreduce(self, flat, op, algorithm, group_size):
        """A backend whose ranks share memory returns the allreduce result here (one
        read-only array, same bits as `algorithm`); None means: pass messages."""
        return None

    def _native_missing(self, *args, **kwargs):
        raise CommArgumentError("algorithm 'native' needs the mpi backend")

    _native_allreduce = _native_reduce = _native_bcast = _native_missing
    _native_reduce_scatter = _native_allgatherv = _native_alltoall = _native_missing


def _describe(x) -> str:
    if x is None:
        return ""
    x = np.asarray(x)
    return f"{_dtype_name(x.dtype)}{list(x.shape)}"
