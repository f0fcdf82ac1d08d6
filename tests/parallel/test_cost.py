"""Topology description, closed-form costs, algorithm selection and the step simulator."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tilepy.parallel import CommArgumentError, cost, simulator, topology
from tilepy.parallel.topology import Level, Topology

TWO_LEVEL = ('{"levels": [{"name": "node", "size": 8, "alpha": 2e-6, "beta": 1e-11},'
             ' {"name": "net", "size": 512, "alpha": 1e-5, "beta": 4e-11,'
             ' "oversubscription": 2}], "gamma": 1e-12}')


def test_json_round_trip_and_levels():
    topo = Topology.from_json(TWO_LEVEL)
    assert topo.world_size == 4096 and topo.overhead == 0.0
    assert Topology.from_json(topo.to_json()) == topo
    timed = Topology(topo.levels, topo.gamma, overhead=3e-5)
    assert Topology.from_json(timed.to_json()).overhead == 3e-5
    assert topo.level_for(8).name == "node" and topo.level_for(9).name == "net"
    assert topo.levels[1].beta_eff == 8e-11


@pytest.mark.parametrize("bad", ['{"levels": []}', '{"levels": [{"size": 2}]}', "{nope"])
def test_bad_json_is_a_comm_error(bad):
    with pytest.raises(CommArgumentError):
        Topology.from_json(bad)


def test_detect_reads_numa_nodes_from_sys():
    assert topology._parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    nodes = topology.numa_nodes()
    assert sum(len(n) for n in nodes) == os.cpu_count()
    topo = topology.detect()
    assert topo.levels[0].size * topo.levels[1].size == os.cpu_count()


def test_closed_forms():
    a, b, g, n = 1e-6, 1e-9, 1e-10, 1e6
    assert cost.flat_cost("ring", 4, n, a, b, g) == pytest.approx(6 * a + 1.5 * n * b
                                                                  + 0.75 * n * g)
    assert cost.flat_cost("recursive_doubling", 4, n, a, b, g) == pytest.approx(
        2 * (a + n * b + n * g))
    assert cost.flat_cost("recursive_doubling", 5, n, a, b, g) == pytest.approx(
        2 * (a + n * b + n * g) + 2 * a + 2 * n * b + n * g)
    assert cost.flat_cost("rabenseifner", 8, n, a, b, g) == pytest.approx(
        6 * a + 1.75 * n * b + 0.875 * n * g)
    assert cost.flat_cost("tree", 5, n, a, b, g) == pytest.approx(6 * (a + n * b) + 3 * n * g)
    assert cost.flat_cost("ring", 1, n, a, b, g) == 0.0


def test_selection_latency_then_bandwidth_bound():
    topo = Topology.from_json(TWO_LEVEL)
    assert cost.select(topo, 4096, 8)[0] == "recursive_doubling"
    assert cost.select(topo, 4096, 64 << 20)[0] in ("rabenseifner", "ring")
    flat = Topology.uniform(8, 1e-6, 1e-10, 0.0)
    assert cost.select(flat, 8, 1 << 30, algorithms=("ring", "tree"))[0] == "ring"
    table = cost.tuning_table(topo, [8, 64 << 20])
    assert "level node: 8 ranks" in table and "level net: 4096 ranks" in table
    assert table.count("recursive_doubling\n") + table.endswith("recursive_doubling") >= 1


def test_hierarchical_cost_uses_both_levels():
    topo = Topology((Level("node", 4, 1e-6, 1e-10), Level("net", 8, 1e-5, 1e-9)), 0.0)
    n = 1e6
    want = 2 * (2e-6 + 2 * n * 1e-10) + cost.flat_cost("ring", 8, n, 1e-5, 1e-9, 0.0)
    assert cost.allreduce_cost(topo, "hierarchical", 32, n) == pytest.approx(want)


def test_buckets_reverse_order_with_cap():
    assert simulator.buckets_of([10, 10, 30, 5, 5], 20) == [[4, 3, 2], [1, 0]]
    assert simulator.buckets_of([1, 1], 100) == [[1, 0]]


def test_simulator_limits():
    free = Topology.uniform(64, 0.0, 0.0, 0.0)
    fwd, bwd, gb = [1e-3] * 4, [2e-3] * 4, [1 << 20] * 4
    r = simulator.simulate_step(free, 64, fwd, bwd, gb)
    assert r.step_time == pytest.approx(12e-3) and r.efficiency == pytest.approx(1.0)
    slow = np.ones(64)
    slow[7] = 1.5  # one straggler: everybody waits for it
    r = simulator.simulate_step(free, 64, fwd, bwd, gb, slowdown=slow)
    assert r.step_time == pytest.approx(18e-3)
    net = Topology.uniform(64, 1e-4, 1e-9, 0.0)
    over = simulator.simulate_step(net, 64, fwd, bwd, gb, bucket_cap=1 << 20)
    serial = simulator.simulate_step(net, 64, fwd, bwd, gb, bucket_cap=1 << 20, overlap=False)
    assert serial.step_time == pytest.approx(12e-3 + serial.comm_time)
    assert over.step_time < serial.step_time and over.exposed_comm < serial.exposed_comm
    # the last bucket (layer 0) is ready only when backward ends: it is always exposed
    last = cost.select(net, 64, 1 << 20)[1]
    assert over.exposed_comm >= last * 0.999


def test_simulator_4096_ranks_in_seconds():
    topo = Topology.from_json(TWO_LEVEL)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    r = simulator.simulate_step(topo, 4096, [1e-3] * 96, [2e-3] * 96, [4 << 20] * 96,
                                slowdown=rng.lognormal(0, 0.05, 4096))
    assert time.perf_counter() - t0 < 2.0
    assert 0 < r.efficiency < 1 and r.bus_bandwidth > 0 and r.step_time > 0.288


def test_overhead_and_ranks_per_core_in_topology_costs():
    n = 1e6
    cores = Topology((Level("cores", 4, 1e-6, 1e-10, 2.0),), gamma=1e-10, overhead=2e-5)
    assert cores.gamma_eff == 2e-10
    # ranks sharing cores: beta and gamma doubled; one overhead per call
    want = 2e-5 + cost.flat_cost("ring", 4, n, 1e-6, 2e-10, 2e-10)
    assert cost.allreduce_cost(cores, "ring", 4, n) == pytest.approx(want)
    # a network level's oversubscription is its links': gamma stays
    net = Topology((Level("node", 2, 0.0, 0.0), Level("net", 4, 1e-6, 1e-10, 2.0)), 1e-10)
    assert net.gamma_eff == 1e-10
    assert cost.shared_cost(4, n, 1e-4, 1e-10) == pytest.approx(1e-4 + 5 * n * 1e-10)


def test_detect_counts_ranks_per_cpu_as_oversubscription():
    import tilepy.parallel as tp

    def body(comm):
        return topology.detect(comm).levels[0]

    p = 2 * os.cpu_count()
    lv = tp.launch(body, p)[0]
    cpus = len(topology.numa_nodes()[0])
    assert lv.size == -(-p // len(topology.numa_nodes()))
    assert lv.oversubscription == pytest.approx(max(1.0, lv.size / cpus)) and lv.size > cpus
