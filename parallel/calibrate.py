"""Calibration: measure the cost model's parameters on this machine (`measure`) and compare
its predictions with timed allreduce sweeps (`predicted_vs_measured`). The functions are
collective: call them on every rank inside `launch`; rank 0's return value holds the
numbers. Times are medians of `reps` runs after one warm-up. No parameter is fitted to the
sweep it predicts (`fit_from_sweep` does that, as a diagnostic only).
"""

from __future__ import annotations

import os
import time

import numpy as np

from tilepy.parallel.cost import flat_cost, shared_cost
from tilepy.parallel.plans import ALGORITHMS as SHARED_ALGORITHMS

PINGPONG_SIZES = (8, 1 << 10, 16 << 10, 128 << 10, 1 << 20, 4 << 20, 16 << 20)


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


def exchange(comm, sizes: list[int], reps: int = 10) -> list[tuple[int, float]]:
    """Seconds of one ring-shift step (every rank sends n bytes to rank + 1 and receives
    from rank - 1 at once), started by a barrier, the slowest rank's: a collective step's
    concurrency (all ranks copying, sharing cores and memory), without reductions."""
    p, r = comm.size, comm.rank
    out = []
    for n in sizes:
        buf = np.zeros(n, np.uint8)

        def step(buf=buf, n=n):
            comm.barrier()
            t0 = time.perf_counter()
            comm.p2p_sendrecv(buf, (r + 1) % p, (r - 1) % p, n, buf.dtype)
            return time.perf_counter() - t0

        step()
        ts = [step() for _ in range(reps)]
        out.append((n, float(comm.allgather(np.array([np.median(ts)])).max())))
    return out


def measure_gamma_concurrent(comm, nbytes: int = 16 << 20, reps: int = 5) -> float:
    """Seconds per byte of one operand when every rank adds its own float32 arrays of
    nbytes / p at once (the reductions of a collective step), the slowest rank's."""
    k = max(1, nbytes // (4 * comm.size))
    a, b, c = (np.ones(k, np.float32) for _ in range(3))

    def add():
        comm.barrier()
        t0 = time.perf_counter()
        np.add(a, b, out=c)
        return float(comm.allgather(np.array([time.perf_counter() - t0])).max())

    add()
    return float(np.median([add() for _ in range(reps)])) / (4 * k)


def fit_alpha_beta(samples: list[tuple[int, float]]) -> tuple[float, float]:
    """Fit of t = alpha + n * beta minimising RELATIVE error (so the small sizes fix alpha
    and the large ones beta); both clipped at 0."""
    n = np.array([s[0] for s in samples], float)
    t = np.array([s[1] for s in samples], float)
    w = 1.0 / t
    design = np.stack([np.ones_like(n), n], 1) * w[:, None]
    a, b = np.linalg.lstsq(design, t * w, rcond=None)[0]
    return max(float(a), 0.0), max(float(b), 0.0)


def _relative_error(samples, a: float, b: float) -> float:
    return float(sum(((a + n * b) / t - 1.0) ** 2 for n, t in samples))


def fit_pieces(samples: list[tuple[int, float]]) -> list[tuple[float, float, float]]:
    """[(up to bytes, alpha, beta), ...]: one alpha-beta line, or two lines split where
    the relative error falls at least 4-fold (MPI switches from an eager protocol to a
    rendezvous one for large messages: a handshake, so the first large size costs MORE
    than the small-message line predicts, and another rate). Each piece holds at least
    two sizes; the last piece reaches infinity."""
    one = fit_alpha_beta(samples)
    best, err = [(float("inf"), *one)], _relative_error(samples, *one)
    for k in range(2, len(samples) - 1):
        lo, hi = fit_alpha_beta(samples[:k]), fit_alpha_beta(samples[k:])
        e = _relative_error(samples[:k], *lo) + _relative_error(samples[k:], *hi)
        n = samples[k][0]  # a switch costs more there than the small-message line
        jump = hi[0] + n * hi[1] > lo[0] + n * lo[1]
        if jump and e < err / 4 and e < _best_err(best, samples):
            best = [(float(samples[k - 1][0]), *lo), (float("inf"), *hi)]
    return best


def _best_err(pieces, samples) -> float:
    return float(sum((message_cost(pieces, n) / t - 1.0) ** 2 for n, t in samples))


def message_cost(pieces, nbytes: float) -> float:
    """Seconds of one message of `nbytes` by the piecewise fit."""
    return next(a + nbytes * b for upto, a, b in pieces if nbytes <= upto)


def piece_for(pieces, nbytes: float) -> tuple[float, float]:
    """(alpha, beta) of the piece that messages of `nbytes` use."""
    return next((a, b) for upto, a, b in pieces if nbytes <= upto)


def largest_message(alg: str, p: int, n: float) -> float:
    """Bytes of an algorithm's largest message: it picks the protocol piece."""
    if alg in ("ring", "mpich_ring"):
        return -(-n // p)
    if alg == "rabenseifner":
        return n / 2
    return n


def measure_gamma(nbytes: int = 16 << 20, reps: int = 5) -> float:
    """Seconds per byte of one operand of a float32 sum into a preallocated array (the
    algorithms reduce into reused buffers; first-touch page faults are not a reduction)."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.ones_like(a)
    c = np.ones_like(a)
    return _median_time(lambda: np.add(a, b, out=c), reps) / nbytes


def measure_copy_beta(comm, nbytes: int = 256 << 20, reps: int = 5) -> float:
    """Seconds per byte moved (read + written) when every rank copies its 1/p share of
    `nbytes` at once (between two barriers): the aggregate memory rate that the ranks of
    a shared-memory allreduce see, with the cores they share. Collective."""
    a = np.ones(max(1, nbytes // comm.size), np.uint8)
    b = np.ones_like(a)

    def copy():
        comm.barrier()
        t0 = time.perf_counter()
        np.copyto(b, a)
        comm.barrier()
        return time.perf_counter() - t0

    copy()
    return float(np.median([copy() for _ in range(reps)])) / (2 * a.size * comm.size)


def measure_add_beta(comm, nbytes: int, reps: int = 5) -> float:
    """Seconds per byte moved when every rank adds two float32 arrays into a third at once,
    `nbytes` touched in all (2/3 read, 1/3 written): the shared-memory allreduce's memory
    rate for a working set of that size, caches included. Collective."""
    per = max(1, nbytes // (3 * 4 * comm.size))
    a, b, c = (np.ones(per, np.float32) for _ in range(3))

    def add():
        comm.barrier()  # start together; time the add alone (a barrier costs more than a
        t0 = time.perf_counter()  # small add), the slowest rank's
        np.add(a, b, out=c)
        t = time.perf_counter() - t0
        return float(comm.allgather(np.array([t])).max())

    add()
    return float(np.median([add() for _ in range(reps)])) / (3 * 4 * per * comm.size)


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def oversubscription(comm) -> float:
    """Ranks per core on this host (>= 1): the local backend's ranks are all here; MPI's
    node_size counts the ranks sharing this host's memory."""
    here = comm.size if comm.backend == "local" else comm.node_size
    return max(1.0, here / cores())


def allreduce_sweep(comm, sizes: list[int], algorithms: list[str], reps: int = 5):
    """{(algorithm, bytes): median seconds} of float32 allreduces as a program calls them
    (no out: the local backend's shared read-only result, MPI's new array), every rep
    started together by a barrier."""
    out = {}
    for n in sizes:
        x = np.ones(max(1, n // 4), np.float32)
        for alg in algorithms:
            def call(a=alg, x=x):
                comm.allreduce(x, algorithm=a)

            def timed(call=call):
                comm.barrier()
                t0 = time.perf_counter()
                call()
                return time.perf_counter() - t0

            call()
            out[(alg, n)] = float(np.median([timed() for _ in range(reps)]))
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


def measure(comm, pingpong_sizes=PINGPONG_SIZES, reps: int = 10,
            copy_bytes: int = 256 << 20):
    """Every model parameter for this communicator: alpha and beta from a ping-pong (also
    fitted in pieces), gamma from timed adds, the per-call overhead from an allreduce on a
    1-rank communicator, oversubscription from ranks per core; for the "exchange" variant,
    alpha and beta from a step with every rank sending at once and gamma from every rank
    adding at once; for the local backend's shared-memory path, the memory rate from every
    rank copying at once and the latency from a 4-byte allreduce. Rank 0 times the adds
    and a call's software alone while the others wait, and broadcasts the figures:
    concurrency is the model's business (oversubscription)."""
    pp = pingpong(comm, list(pingpong_sizes), reps=reps)
    alpha, beta = fit_alpha_beta(pp)
    pieces = fit_pieces(pp)
    shared = _uses_shared_memory(comm)
    solo = comm.split(comm.rank)
    figures = None
    if comm.rank == 0:
        x = np.ones(1, np.float32)
        figures = np.array([
            measure_gamma(), _median_time(lambda: solo.allreduce(x, algorithm="ring"), reps)])
    gamma, overhead = comm.bcast(figures, 0)
    beta_mem = measure_copy_beta(comm, copy_bytes) if shared else 0.0
    ex = exchange(comm, list(pingpong_sizes), reps) if comm.size > 1 else []
    params = {"alpha": alpha, "beta": beta, "pieces": pieces, "gamma": float(gamma),
              "pingpong": pp, "exchange": ex,
              "gamma_concurrent": measure_gamma_concurrent(comm),
              "oversubscription": oversubscription(comm), "overhead": float(overhead),
              "cores": cores(), "shared": shared, "beta_mem": float(beta_mem)}
    if shared:  # timed as the sweep times a call: started together by a barrier
        params["latency"] = allreduce_sweep(comm, [4], ["ring"], 3 * reps)[("ring", 4)]
    return params


def _uses_shared_memory(comm) -> bool:
    return comm.backend == "local" and getattr(comm, "shared_memory", False)


def predict(params: dict, alg: str, p: int, n: float, model: str = "full") -> float:
    """Seconds of one allreduce. model "plain": Thakur et al.'s alpha-beta-gamma from the
    ping-pong's one line (what the previous fits used); "full": on the local backend's
    shared-memory path its latency and memory traffic (cost.shared_cost), else the call's
    overhead plus alpha-beta-gamma with alpha and beta from the ping-pong piece (eager or
    rendezvous) of the algorithm's largest message, and alpha, beta and gamma times the
    ranks per core o: in a collective every rank is busy at every step, so each core runs
    o ranks in turn (the ping-pong keeps only two busy). "exchange": as "full", but alpha
    and beta from a ring-shift step with every rank sending at once and gamma from every
    rank adding at once (the step's concurrency measured instead of derived from o)."""
    a, b, g = params["alpha"], params["beta"], params["gamma"]
    if model == "plain":
        return flat_cost(alg, p, n, a, b, g)
    if params["shared"] and alg in SHARED_ALGORITHMS:
        beta_mem = params.get("beta_mem_at", {}).get(n, params["beta_mem"])
        return shared_cost(p, n, params["latency"], beta_mem)
    if model == "exchange":
        a, b = piece_for(params["exchange_pieces"], largest_message(alg, p, n))
        return params["overhead"] + flat_cost(alg, p, n, a, b, params["gamma_concurrent"])
    o = params["oversubscription"]
    a, b = piece_for(params.get("pieces") or [(float("inf"), a, b)], largest_message(alg, p, n))
    return params["overhead"] + flat_cost(alg, p, n, a * o, b * o, g * o)


def _measure_at(comm, sizes, measure_args) -> dict:
    """measure(), and on the shared-memory path the memory rate at each size's working
    set ((p + 1) n bytes, as the allreduce touches)."""
    params = measure(comm, **measure_args)
    if params["shared"]:
        params["beta_mem_at"] = {n: measure_add_beta(comm, (comm.size + 1) * n)
                                 for n in sizes}
    return params


def predicted_vs_measured(comm, sizes, algorithms, reps: int = 5, rounds: int = 1,
                          **measure_args):
    """Measure the parameters, then the sweep, `rounds` times in turn (load drifts: every
    figure is the median over rounds). Rows: ping-pong (bytes, one line s, pieces s,
    measured s) and allreduce (alg, bytes, plain predicted s, full predicted s, sweep-fit
    s, measured s, exchange-calibrated predicted s)."""
    runs = [(_measure_at(comm, sizes, measure_args),
             allreduce_sweep(comm, sizes, algorithms, reps)) for _ in range(rounds)]
    params = {k: (float(np.median([r[0][k] for r in runs])) if isinstance(v, float) else v)
              for k, v in runs[0][0].items()}
    params["pingpong"] = [(n, float(np.median([r[0]["pingpong"][i][1] for r in runs])))
                          for i, (n, _) in enumerate(runs[0][0]["pingpong"])]
    # the lines are fitted to the median ping-pong, before any prediction uses them
    params["alpha"], params["beta"] = fit_alpha_beta(params["pingpong"])
    params["pieces"] = fit_pieces(params["pingpong"])
    params["exchange"] = [(n, float(np.median([r[0]["exchange"][i][1] for r in runs])))
                          for i, (n, _) in enumerate(runs[0][0]["exchange"])]
    params["exchange_pieces"] = (fit_pieces(params["exchange"]) if params["exchange"]
                                 else [(float("inf"), 0.0, 0.0)])
    if params["shared"]:
        params["beta_mem_at"] = {n: float(np.median([r[0]["beta_mem_at"][n] for r in runs]))
                                 for n in sizes}
    measured = {k: float(np.median([r[1][k] for r in runs])) for k in runs[0][1]}
    p = comm.size
    sweep_fit = fit_from_sweep(measured, p) if p > 1 else (0.0, 0.0, 0.0)
    rows = [(alg, n, predict(params, alg, p, n, "plain"), predict(params, alg, p, n),
             flat_cost(alg, p, n, *sweep_fit), measured[(alg, n)],
             predict(params, alg, p, n, "exchange"))
            for (alg, n) in measured]
    pp_rows = [(n, params["alpha"] + n * params["beta"], message_cost(params["pieces"], n), t)
               for n, t in params["pingpong"]]
    return {**params, "sweep_fit": sweep_fit, "rows": rows, "pingpong_rows": pp_rows,
            "rounds": rounds}
