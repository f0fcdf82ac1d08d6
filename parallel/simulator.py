"""Discrete-event simulation of a data-parallel training step on up to thousands of ranks:
per rank a compute stream (forward, then backward layer by layer, slowed by its straggler
factor), and one shared communication stream where a gradient bucket's allreduce starts
when the bucket is ready on every rank and the previous collective has finished, and lasts
what cost.py predicts. Events are vectorised over ranks, so thousands of ranks stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.parallel.cost import allreduce_cost, select
from tilepy.parallel.topology import Topology


@dataclass(frozen=True)
class StepResult:
    step_time: float
    compute_time: float  # slowest rank's compute
    comm_time: float  # busy time of the communication stream
    exposed_comm: float  # step_time - compute_time
    bus_bandwidth: float  # bytes/s, nccl-tests convention: 2(p-1)/p * bytes / comm time
    efficiency: float  # one rank's compute time / step_time (weak scaling)
    events: list  # (name, stream, start, end) for the trace


def buckets_of(grad_bytes: list[int], cap: int) -> list[list[int]]:
    """Layer indices per bucket: reverse registration order, a bucket closes past `cap`."""
    out, cur, size = [], [], 0
    for i in reversed(range(len(grad_bytes))):
        cur.append(i)
        size += grad_bytes[i]
        if size >= cap:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def simulate_step(topo: Topology, p: int, fwd: list[float], bwd: list[float],
                  grad_bytes: list[int], bucket_cap: int = 25 << 20,
                  slowdown: np.ndarray | None = None, algorithm: str | None = None,
                  overlap: bool = True, optimizer_time: float = 0.0) -> StepResult:
    """One step: forward, backward with bucketed allreduces, then the optimizer."""
    slow = np.ones(p) if slowdown is None else np.asarray(slowdown, float)
    t_fwd = sum(fwd) * slow  # per rank
    # finish time of each layer's backward on every rank (backward runs last layer first)
    order = list(reversed(range(len(bwd))))
    finish = t_fwd[None, :] + np.cumsum([[bwd[i]] for i in order], axis=0) * slow[None, :]
    done_at = {layer: finish[k] for k, layer in enumerate(order)}
    compute_end = finish[-1] if len(order) else t_fwd
    comm_free, comm_busy, sent, events = 0.0, 0.0, 0.0, []
    for b, layers in enumerate(buckets_of(grad_bytes, bucket_cap)):
        nbytes = sum(grad_bytes[i] for i in layers)
        ready = float(np.max(done_at[layers[-1]])) if overlap else float(np.max(compute_end))
        alg = algorithm or select(topo, p, nbytes)[0]
        dur = allreduce_cost(topo, alg, p, nbytes)
        start = max(ready, comm_free)
        comm_free = start + dur
        comm_busy += dur
        sent += nbytes
        events.append((f"bucket {b} {alg} {nbytes} B", "comm", start, comm_free))
    t_compute = float(np.max(compute_end))
    step = max(t_compute, comm_free) + optimizer_time
    one_rank = sum(fwd) + sum(bwd) + optimizer_time
    busbw = 2 * (p - 1) / p * sent / comm_busy if comm_busy > 0 else 0.0
    events.insert(0, ("compute (slowest rank)", "compute", 0.0, t_compute))
    return StepResult(step, t_compute, comm_busy, step - optimizer_time - t_compute,
                      busbw, one_rank / step, events)


def scaling(topo_for, ps, **step_kw) -> list[tuple[int, StepResult]]:
    """simulate_step for each world size p (topo_for(p) gives its topology)."""
    return [(p, simulate_step(topo_for(p), p, **step_kw)) for p in ps]
