"""Chrome/Perfetto traces of a profiling session: the JSON object format of chrome://tracing
(one complete "X" event per launch, timestamps in microseconds, the counts in `args`).
"""

from __future__ import annotations

import json
import os


def chrome_trace(session) -> dict:
    """The session's launches as a trace document (a dict ready for json.dump)."""
    pid = os.getpid()
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": "tilepy kernels"}}]
    for rec in session.launches:
        c = session.counts(rec)
        secs = max(rec.seconds, 1e-9)
        events.append({
            "name": rec.name, "cat": rec.backend, "ph": "X", "pid": pid, "tid": rec.thread,
            "ts": rec.start_ns / 1e3, "dur": rec.seconds * 1e6,
            "args": {"sizes": rec.sizes, "flops": c.flops, "bytes": c.global_bytes,
                     "GFLOP/s": round(c.flops / secs / 1e9, 3),
                     "GB/s": round(c.global_bytes / secs / 1e9, 3),
                     "counts_exact": c.exact},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write(doc: dict, path) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, allow_nan=False, default=str)
