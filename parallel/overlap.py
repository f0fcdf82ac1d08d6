"""Overlap engine: gradients grouped in buckets (size cap, reverse registration order) and
allreduced by a per-rank communication thread while the caller keeps computing; a
timeline of compute vs communication (Chrome trace JSON) and the exposed-communication
fraction that was measured. Reduction order is the algorithm's: same bits as a plain call.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from contextlib import contextmanager

import numpy as np

from tilepy.parallel.errors import CommArgumentError, CommTimeoutError


class Timeline:
    """Spans (name, stream, start, end) in seconds from creation; Chrome trace output."""

    def __init__(self, rank: int = 0):
        self.rank, self.t0, self.spans = rank, time.perf_counter(), []
        self._lock = threading.Lock()

    def add(self, name: str, stream: str, start: float, end: float) -> None:
        with self._lock:
            self.spans.append((name, stream, start - self.t0, end - self.t0))

    @contextmanager
    def span(self, name: str, stream: str = "compute"):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, stream, start, time.perf_counter())

    def busy(self, stream: str) -> float:
        return sum(e - s for _, st, s, e in self.spans if st == stream)

    def chrome_trace(self, others: list[Timeline] = ()) -> str:
        """JSON for chrome://tracing / Perfetto: one process per rank, one thread per stream."""
        events = []
        for tl in [self, *others]:
            for name, stream, s, e in tl.spans:
                events.append({"name": name, "ph": "X", "pid": tl.rank, "tid": stream,
                               "ts": s * 1e6, "dur": (e - s) * 1e6})
        return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})


class BucketReducer:
    """Register parameters once; per step call `ready(name, grad)` as backward produces
    gradients (any order) and `wait()` for the reduced ones. Buckets: parameters in REVERSE
    registration order, a bucket closes when it reaches `cap_bytes`."""

    def __init__(self, comm, params: list[tuple[str, tuple, np.dtype]], cap_bytes: int = 1 << 20,
                 algorithm: str = "ring", op: str = "sum", timeline: Timeline | None = None):
        self.comm, self.algorithm, self.op = comm, algorithm, op
        self.timeline = timeline or Timeline(comm.rank)
        self.shapes = {n: (tuple(s), np.dtype(d)) for n, s, d in params}
        self.buckets = self._plan(params, cap_bytes)
        self.bucket_of = {n: b for b, names in enumerate(self.buckets) for n in names}
        self.exposed = 0.0
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._serve, daemon=True,
                                        name=f"tilepy-comm-{comm.rank}")
        self._worker.start()
        self._reset()

    @staticmethod
    def _plan(params, cap):
        buckets, cur, size = [], [], 0
        for name, shape, dtype in reversed(params):
            cur.append(name)
            size += int(np.prod(shape)) * np.dtype(dtype).itemsize
            if size >= cap:
                buckets.append(cur)
                cur, size = [], 0
        return buckets + ([cur] if cur else [])

    def _reset(self):
        self._pending = {b: set(names) for b, names in enumerate(self.buckets)}
        self._grads: dict = {}
        self._results: dict = {}
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._launched = 0

    def ready(self, name: str, grad: np.ndarray) -> None:
        if name not in self.bucket_of:
            raise CommArgumentError(f"gradient {name!r} was not registered")
        b = self.bucket_of[name]
        self._grads[name] = np.ascontiguousarray(grad, self.shapes[name][1]).reshape(-1)
        self._pending[b].discard(name)
        if not self._pending[b]:
            self._queue.put(b)
            self._launched += 1

    def _serve(self):
        while True:
            b = self._queue.get()
            if b is None:
                return
            try:
                names = self.buckets[b]
                flat = np.concatenate([self._grads[n] for n in names])
                start = time.perf_counter()
                out = self.comm.allreduce(flat, self.op, self.algorithm)
                self.timeline.add(f"allreduce bucket {b} ({flat.nbytes} B)", "comm", start,
                                  time.perf_counter())
                self._results[b] = out
            except BaseException as exc:  # noqa: BLE001 - re-raised in wait()
                self._error = exc
            if self._error is not None or len(self._results) == len(self.buckets):
                self._done.set()

    def wait(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Block until every bucket is reduced; returns {name: reduced gradient} (read-only
        views of the allreduce results: copy one to modify it)."""
        if self._launched != len(self.buckets):
            missing = sorted(n for names in self._pending.values() for n in names)
            raise CommArgumentError(f"wait() before every gradient was ready: {missing}")
        start = time.perf_counter()
        if not self._done.wait(self.comm.timeout if timeout is None else timeout):
            raise CommTimeoutError(f"rank {self.comm.rank}: bucket allreduces did not finish")
        end = time.perf_counter()
        self.exposed += end - start
        self.timeline.add("wait (exposed)", "compute", start, end)
        if self._error is not None:
            raise self._error
        out = {}
        for b, names in enumerate(self.buckets):
            off = 0
            for n in names:
                shape, _ = self.shapes[n]
                k = int(np.prod(shape))
                out[n] = self._results[b][off:off + k].reshape(shape)
                off += k
        self._reset()
        return out

    def exposed_fraction(self) -> float:
        """Time blocked in wait() / time the communication thread was busy."""
        busy = self.timeline.busy("comm")
        return self.exposed / busy if busy > 0 else 0.0

    def close(self) -> None:
        self._queue.put(None)
        self._worker.join(5.0)
