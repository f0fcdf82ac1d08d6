"""Calibration fits and the MPICH replay table (pure parts; MPI runs are in test_mpi.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.parallel.helpers import inputs, launch, same_bits
from tilepy.parallel import CommArgumentError, calibrate, replay, spec


def test_fit_recovers_alpha_beta_exactly():
    a, b = 3e-6, 1 / 5e9
    samples = [(n, a + n * b) for n in (8, 1024, 1 << 16, 1 << 20, 1 << 23)]
    fa, fb = calibrate.fit_alpha_beta(samples)
    assert fa == pytest.approx(a, rel=1e-6) and fb == pytest.approx(b, rel=1e-6)


def test_fit_from_sweep_separates_beta_and_gamma():
    from tilepy.parallel.cost import flat_cost
    a, b, g, p = 4e-6, 1 / 3e9, 1 / 7e9, 4
    measured = {(alg, n): flat_cost(alg, p, n, a, b, g)
                for alg in ("ring", "recursive_doubling") for n in (64, 1 << 16, 1 << 22)}
    fa, fb, fg = calibrate.fit_from_sweep(measured, p)
    assert (fa, fb, fg) == pytest.approx((a, b, g), rel=1e-6)


def test_pingpong_and_sweep_on_local_ranks():
    def body(comm):
        pp = calibrate.pingpong(comm, [8, 1 << 16], reps=3)
        sw = calibrate.allreduce_sweep(comm, [64, 4096], ["ring", "tree"], reps=3)
        return pp, sw

    pp, sw = launch(body, 3)[0]
    assert [n for n, _ in pp] == [8, 1 << 16] and all(t > 0 for _, t in pp)
    assert set(sw) == {("ring", 64), ("tree", 64), ("ring", 4096), ("tree", 4096)}
    assert calibrate.measure_gamma(1 << 20, reps=2) > 0


def test_replay_table_and_errors():
    xs = inputs(4, 9, np.float32, seed=1)
    assert same_bits(replay.mpich_allreduce(xs), (xs[0] + xs[1]) + (xs[2] + xs[3]))
    assert same_bits(replay.mpich_allreduce(xs, "ring"), spec.ring(xs, "sum", "ceil"))
    assert replay.tilepy_algorithm("reduce_scatter_allgather") == "rabenseifner"
    with pytest.raises(CommArgumentError, match="replayed"):
        replay.tilepy_algorithm("knomial")



PARAMS = {"alpha": 2e-6, "beta": 1e-10, "gamma": 3e-10, "overhead": 5e-6,
          "oversubscription": 2.0, "shared": False, "latency": 7e-5, "beta_mem": 1e-10}


def test_predict_plain_and_full_models():
    from tilepy.parallel.cost import flat_cost
    n = 1 << 20
    plain = calibrate.predict(PARAMS, "ring", 4, n, "plain")
    assert plain == pytest.approx(6 * 2e-6 + 1.5 * n * 1e-10 + 0.75 * n * 3e-10)
    full = calibrate.predict(PARAMS, "ring", 4, n)
    # every rank busy at every step: alpha, beta and gamma scale by the ranks per core
    assert full == pytest.approx(5e-6 + flat_cost("ring", 4, n, 4e-6, 2e-10, 6e-10))
    assert full == pytest.approx(5e-6 + 2 * plain)
    shared = {**PARAMS, "shared": True}
    # the shared-memory path: latency + (p + 1) n bytes of memory traffic
    assert calibrate.predict(shared, "tree", 4, n) == pytest.approx(7e-5 + 5 * n * 1e-10)
    assert calibrate.predict(shared, "ring", 1, n) == pytest.approx(7e-5 + 2 * n * 1e-10)
    # measured concurrency instead of o: the exchange step's line and the concurrent adds
    ex = {**PARAMS, "exchange_pieces": [(float("inf"), 9e-6, 4e-10)], "gamma_concurrent": 7e-10}
    assert calibrate.predict(ex, "ring", 4, n, "exchange") == pytest.approx(
        5e-6 + flat_cost("ring", 4, n, 9e-6, 4e-10, 7e-10))
    # a rate measured at this size's working set replaces the 256 MiB one
    at = {**shared, "beta_mem_at": {n: 3e-11}}
    assert calibrate.predict(at, "ring", 4, n) == pytest.approx(7e-5 + 5 * n * 3e-11)
    assert calibrate.predict(at, "ring", 4, 2 * n) == pytest.approx(7e-5 + 10 * n * 1e-10)


def test_measure_and_predicted_vs_measured_on_local_ranks():
    def body(comm, shared):
        comm.shared_memory = shared
        return calibrate.predicted_vs_measured(comm, [64, 4096], ["ring", "tree"], reps=2,
                                               rounds=2, pingpong_sizes=(8, 1 << 12),
                                               copy_bytes=1 << 20)

    for shared in (True, False):
        fit = launch(body, 3, shared)[0]
        assert fit["shared"] is shared and fit["rounds"] == 2
        assert fit["oversubscription"] == max(1.0, 3 / calibrate.cores())
        assert fit["gamma"] > 0 and fit["overhead"] > 0
        assert (fit["beta_mem"] > 0) is shared and (fit.get("latency", 0) > 0) is shared
        assert sorted(fit.get("beta_mem_at", {})) == ([64, 4096] if shared else [])
        assert [r[:2] for r in fit["rows"]] == [("ring", 64), ("tree", 64), ("ring", 4096),
                                                ("tree", 4096)]
        for alg, n, plain, full, _swept, meas, exch in fit["rows"]:
            assert plain > 0 and full > 0 and meas > 0
            # the rows come from the parameters reported (medians over the rounds)
            assert plain == calibrate.predict(fit, alg, 3, n, "plain")
            assert full == calibrate.predict(fit, alg, 3, n)
            assert exch == calibrate.predict(fit, alg, 3, n, "exchange") > 0
        assert (fit["alpha"], fit["beta"]) == calibrate.fit_alpha_beta(fit["pingpong"])
        assert [r[0] for r in fit["pingpong_rows"]] == [8, 1 << 12]
        assert [n for n, _ in fit["exchange"]] == [8, 1 << 12]
        assert all(t > 0 for _, t in fit["exchange"]) and fit["gamma_concurrent"] > 0


def test_fit_pieces_finds_a_protocol_switch_and_only_then():
    eager, rendezvous = (3e-6, 1 / 6e9), (1.5e-3, 1 / 2e9)
    sizes = [8, 1024, 16384, 131072, 1 << 20, 4 << 20, 16 << 20]
    two = [(n, (eager if n <= 131072 else rendezvous)[0]
            + n * (eager if n <= 131072 else rendezvous)[1]) for n in sizes]
    pieces = calibrate.fit_pieces(two)
    assert len(pieces) == 2 and pieces[0][0] == 131072 and pieces[1][0] == float("inf")
    assert pieces[0][1:] == pytest.approx(eager, rel=1e-6)
    assert pieces[1][1:] == pytest.approx(rendezvous, rel=1e-6)
    assert calibrate.message_cost(pieces, 1 << 20) == pytest.approx(1.5e-3 + (1 << 20) / 2e9)
    # one slow size is noise on one line (the local mailboxes), not a protocol switch:
    # the sizes above it are not slower than the line below predicts, so one piece
    odd = [(n, 5e-5 if n != 131072 else 9e-5) for n in sizes]
    assert len(calibrate.fit_pieces(odd)) == 1
    line = [(n, eager[0] + n * eager[1]) for n in sizes]
    (single,) = calibrate.fit_pieces(line)
    assert single[0] == float("inf") and single[1:] == pytest.approx(eager, rel=1e-6)
    assert calibrate.largest_message("ring", 4, 10) == 3
    assert calibrate.largest_message("rabenseifner", 4, 10) == 5
    assert calibrate.largest_message("tree", 4, 10) == 10
