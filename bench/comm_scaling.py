"""Cost-model tables: NCCL-style algorithm choice per size and level, and the simulated
data-parallel scaling of a model from 8 to 4096 ranks (bucketed, overlapped allreduce).

  python bench/comm_scaling.py [topology.json]
Without a file, an example cluster: 8 ranks per node (2 us, 100 GB/s), 512 nodes
(10 us, 25 GB/s, 2:1 oversubscribed), reduction at 50 GB/s. A model, no measurement:
`make bench-comm` unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE only for uniformity.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from tilepy.parallel import cost, simulator
from tilepy.parallel.topology import Level, Topology

EXAMPLE = Topology((Level("node", 8, 2e-6, 1 / 100e9), Level("network", 512, 10e-6, 1 / 25e9,
                                                               2.0)), gamma=1 / 50e9)


def topo_for(base: Topology, p: int) -> Topology:
    """The first levels of `base` trimmed to p ranks."""
    levels, left = [], p
    for lv in base.levels:
        size = min(lv.size, left)
        levels.append(Level(lv.name, max(size, 1), lv.alpha, lv.beta, lv.oversubscription))
        left = -(-left // max(size, 1))
    return Topology(tuple(levels), base.gamma, overhead=base.overhead)


def main():
    base = Topology.from_json(sys.argv[1]) if len(sys.argv) > 1 else EXAMPLE
    print(cost.tuning_table(base, cost.sizes(8, 256 << 20)))
    # a 350M-parameter model in fp32 gradients, 48 layers, 60 ms of compute per step
    layers = 48
    grad = [int(350e6 * 4 / layers)] * layers
    fwd, bwd = [20e-3 / layers] * layers, [40e-3 / layers] * layers
    rng = np.random.default_rng(0)
    print("\n| ranks | step ms | exposed comm ms | busbw GB/s | efficiency | sim time ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in (8, 64, 512, 4096):
        t0 = time.perf_counter()
        r = simulator.simulate_step(topo_for(base, p), p, fwd, bwd, grad, bucket_cap=25 << 20,
                                    slowdown=rng.lognormal(0.0, 0.02, p))
        dt = time.perf_counter() - t0
        print(f"| {p} | {r.step_time * 1e3:.1f} | {r.exposed_comm * 1e3:.1f} | "
              f"{r.bus_bandwidth / 1e9:.1f} | {r.efficiency:.2f} | {dt * 1e3:.1f} |")


if __name__ == "__main__":
    main()
