"""Overlap engine: bucket plan, same bits as plain allreduce, trace, exposed fraction."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import tilepy.parallel as tp
from tests.parallel.helpers import launch, same_bits
from tilepy.parallel.overlap import BucketReducer, Timeline

PARAMS = [(f"w{i}", (64, 64), np.float32) for i in range(6)]  # 16 KiB each


def test_bucket_plan_reverse_registration_with_cap():
    def body(comm):
        r = BucketReducer(comm, PARAMS, cap_bytes=40 << 10)
        plan = r.buckets
        r.close()
        return plan

    assert launch(body, 1)[0] == [["w5", "w4", "w3"], ["w2", "w1", "w0"]]


def test_overlapped_results_equal_plain_allreduce_and_trace():
    rng = np.random.default_rng(0)
    grads = [{n: rng.standard_normal(s).astype(d) for n, s, d in PARAMS} for _ in range(3)]

    def body(comm):
        red = BucketReducer(comm, PARAMS, cap_bytes=32 << 10, algorithm="ring")
        outs = []
        for _step in range(2):
            for name, _, _ in reversed(PARAMS):  # backward: last layer first
                with red.timeline.span(f"backward {name}"):
                    a = np.ones((160, 160))
                    for _ in range(4):
                        a = a @ a / 160.0  # compute that releases the GIL
                red.ready(name, grads[comm.rank][name])
            outs.append(red.wait())
        plain = {n: comm.allreduce(np.concatenate(
            [grads[comm.rank][m].reshape(-1) for m in b]), algorithm="ring")
            for b in red.buckets for n in b[:1]}
        red.close()
        return outs, plain, red.buckets, red.timeline, red.exposed_fraction()

    res = launch(body, 3)
    for outs, plain, buckets, tl, frac in res:
        for out in outs:
            for b in buckets:
                flat = np.concatenate([out[n].reshape(-1) for n in b])
                assert same_bits(flat, plain[b[0]])
        assert 0.0 <= frac
        assert tl.busy("comm") > 0 and tl.busy("compute") > 0
    trace = json.loads(res[0][3].chrome_trace([r[3] for r in res[1:]]))
    tids = {(e["pid"], e["tid"]) for e in trace["traceEvents"]}
    assert {(0, "comm"), (2, "compute")} <= tids


def test_overlap_hides_communication_behind_compute():
    # the "network" is slow (sleeps, no CPU) so overlap can hide it even on 2 cores
    class SlowComm:
        rank, size, timeout = 0, 1, 10.0

        def allreduce(self, x, op, algorithm):
            time.sleep(0.02)
            return x.copy()

    red = BucketReducer(SlowComm(), PARAMS, cap_bytes=16 << 10)
    t0 = time.perf_counter()
    for name, _, _ in reversed(PARAMS):
        time.sleep(0.04)  # compute
        red.ready(name, np.ones((64, 64), np.float32))
    red.wait()
    t_overlap = time.perf_counter() - t0
    frac = red.exposed_fraction()
    red.close()
    # serial would take 6 x 40 ms compute + 6 x 20 ms communication = 360 ms; overlapped,
    # only the last bucket's 20 ms is exposed (260 ms): require at least half hidden
    assert frac < 0.5
    assert t_overlap < 6 * 0.04 + 6 * 0.02 * 0.5


def test_wait_before_all_ready_and_unknown_name_are_errors():
    def body(comm):
        red = BucketReducer(comm, PARAMS)
        try:
            with pytest.raises(tp.CommArgumentError, match="w0"):
                red.wait()
            with pytest.raises(tp.CommArgumentError):
                red.ready("nope", np.ones(3))
        finally:
            red.close()
        return True

    assert launch(body, 1) == [True]


def test_timeline_chrome_trace_format():
    tl = Timeline(rank=3)
    with tl.span("fwd"):
        time.sleep(0.001)
    ev = json.loads(tl.chrome_trace())["traceEvents"][0]
    assert ev["ph"] == "X" and ev["pid"] == 3 and ev["tid"] == "compute" and ev["dur"] >= 1000
