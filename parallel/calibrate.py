"""Calibration: fit alpha and beta from a measured ping-pong, gamma from timed reductions,
and compare the cost model's allreduce predictions with measured allreduce sweeps.

Call the functions on every rank inside `launch` (they are collective); rank 0's return
value holds the numbers. Times are medians of `reps` runs after one warm-up.
"""

from __future__ import annotations

import time

import numpy as np

from tilepy.parallel.cost import flat_cost


def _median_time(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def pingpong(comm, sizes: list[int], reps: int = 20) -> list[tuple[int, float]]:
    """One-way times between ranks 0 and 1 (half a round trip); other ranks only wait."""
    out = []
    for n in sizes:
        buf = np.zeros(n, np.uint8)

        def trip(buf=buf, n=n):
            if comm.rank == 0:
                comm.p2p_send(buf, 1)
                comm.p2p_recv(1, n, buf.dtype)
            elif comm.rank == 1:
                comm.p2p_send(comm.p2p_recv(0, n, buf.dtype), 0)

        comm.barrier()
        out.append((n, _median_time(trip, reps) / 2))
    return out


def fit_alpha_beta(samples: list[tuple[int, float]]) -> tuple[float, float]:
    """Fit of t = alpha + n * beta minimising RELATIVE error (so the small sizes fix alpha
    and the large ones beta); both clipped at 0."""
    n = np.array([s[0] for s in samples], float)
    t = np.array([s[1] for s in samples], float)
    w = 1.0 / t
    design = np.stack([np.ones_like(n), n], 1) * w[:, None]
    a, b = np.linalg.lstsq(design, t * w, rcond=None)[0]
    return max(float(a), 0.0), max(float(b), 0.0)


def measure_gamma(nbytes: int = 16 << 20, reps: int = 5) -> float:
    """Seconds per byte of a float32 sum of two arrays into a new one."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.ones_like(a)
    return _median_time(lambda: np.add(a, b), reps) / nbytes


def allreduce_sweep(comm, sizes: list[int], algorithms: list[str], reps: int = 5):
    """{(algorithm, bytes): median seconds} of float32 allreduces (same on every rank)."""
    out = {}
    for n in sizes:
        x = np.ones(max(1, n // 4), np.float32)
        for alg in algorithms:
            comm.barrier()
            out[(alg, n)] = _median_time(lambda a=alg, x=x: comm.allreduce(x, algorithm=a),
                                         reps)
    return out


def _coefficients(alg: str, p: int, n: float) -> list[float]:
    """Multipliers of (alpha, beta, gamma) in flat_cost: the cost is linear in them."""
    return [flat_cost(alg, p, n, 1.0, 0.0, 0.0), flat_cost(alg, p, n, 0.0, 1.0, 0.0),
            flat_cost(alg, p, n, 0.0, 0.0, 1.0)]


def fit_from_sweep(measured: dict, p: int) -> tuple[float, float, float]:
    """Least-squares (relative error) alpha, beta, gamma from allreduce sweeps of several
    algorithms ({(alg, bytes): seconds}); beta and gamma separate only when the sweep
    holds algorithms that weigh them differently (e.g. ring and recursive doubling)."""
    rows = [_coefficients(a, p, n) for (a, n) in measured]
    t = np.array(list(measured.values()))
    design = np.array(rows) / t[:, None]
    coef = np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]
    return tuple(max(float(c), 0.0) for c in coef)


def predicted_vs_measured(comm, sizes, algorithms, reps: int = 5):
    """Fit alpha/beta/gamma here, then rows (alg, bytes, predicted s, measured s)."""
    pp = pingpong(comm, [8, 1 << 10, 64 << 10, 1 << 20, 8 << 20], reps=10)
    alpha, beta = fit_alpha_beta(pp)
    gamma = measure_gamma()
    measured = allreduce_sweep(comm, sizes, algorithms, reps)
    sweep_fit = fit_from_sweep(measured, comm.size) if comm.size > 1 else (0.0, 0.0, 0.0)
    rows = [(alg, n, flat_cost(alg, comm.size, n, alpha, beta, gamma),
             flat_cost(alg, comm.size, n, *sweep_fit), measured[(alg, n)])
            for (alg, n) in measured]
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "pingpong": pp,
            "sweep_fit": sweep_fit, "rows": rows}
