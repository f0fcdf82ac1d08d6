"""nccl-tests-style allreduce tables for tilepy.parallel, side by side with mpi4py.

  python bench/collectives.py            # local + mpi at 2, 3 and 4 ranks, + cost model
  python bench/collectives.py --quick    # fewer sizes, for a smoke run
  python bench/collectives.py --goal     # only: 64 MiB on 4 local ranks vs copy bandwidth
Columns: size, time (median us), algbw = bytes / time, busbw = algbw * 2(p-1)/p (GB/s).
A column "ring" is the default call (local: the shared-memory path, read-only result);
"ring out=" writes a private out buffer; "ring messages" is the local message-passing path.
MPI rows come from `mpiexec -n p python bench/collectives.py --worker`, run by this script.
`make bench-comm` runs it with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset for its own
command (they slow numpy's adds on these machines); tests leave them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import tilepy.parallel as tp
from tilepy.parallel import calibrate

MIB = 1 << 20
SIZES = [8, 64, 512, 4096, 32768, 262144, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
QUICK = [8, 4096, MIB, 16 * MIB]
MODEL_SIZES = [64, 4096, 256 << 10, 4 * MIB, 16 * MIB]


def reps_for(nbytes: int) -> int:
    return 5 if nbytes >= 16 * MIB else 10 if nbytes >= MIB else 30


def time_allreduce(comm, nbytes: int, column: str, reps: int | None = None) -> float:
    """Median seconds of one column's call: "alg", "alg out=", "alg messages" (local
    backend, message passing) or "mpi4py.Allreduce" (which writes an out buffer)."""
    alg, _, mode = column.partition(" ")
    x = np.ones(max(1, nbytes // 4), np.float32)
    out = np.empty_like(x) if mode == "out=" or alg == "mpi4py.Allreduce" else None
    if alg == "mpi4py.Allreduce":
        from mpi4py import MPI
        call = lambda: comm.mcomm.Allreduce(x, out, MPI.SUM)
    else:
        call = lambda: comm.allreduce(x, algorithm=alg, out=out)
    comm.shared_memory = mode != "messages"  # read by the local backend only
    call()
    ts = []
    for _ in range(reps or reps_for(nbytes)):
        comm.barrier()
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def sweep(comm, sizes, columns):
    """{column: [seconds per size]}; the max over ranks of each median (the job's time)."""
    res = {}
    for col in columns:
        ts = [time_allreduce(comm, n, col) for n in sizes]
        all_ts = comm.allgather(np.array(ts))
        res[col] = all_ts.max(axis=0).tolist()
    return res


def table(title: str, p: int, sizes, res) -> str:
    lines = [f"## {title}, {p} ranks", "| size | " + " | ".join(
        f"{a} time us | algbw | busbw" for a in res) + " |",
             "|---:|" + "---:|---:|---:|" * len(res)]
    for i, n in enumerate(sizes):
        cells = []
        for ts in res.values():
            t = ts[i]
            alg = n / t / 1e9
            cells.append(f"{t * 1e6:.1f} | {alg:.3f} | {alg * 2 * (p - 1) / p:.3f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_COPY: list = []


def memory_bandwidth(threads: int = 1, nbytes: int = 256 * MIB, reps: int = 5) -> float:
    """numpy copy of 256 MiB (beyond the caches), bytes read + written per second, split
    over `threads` threads (np.copyto releases the GIL), median of `reps`."""
    if not _COPY:
        _COPY.extend([np.ones(nbytes, np.uint8), np.ones(nbytes, np.uint8)])
    a, b = _COPY
    cuts = [nbytes * k // threads for k in range(threads + 1)]
    spans = list(zip(cuts[:-1], cuts[1:]))

    def copy():
        ts = [threading.Thread(target=np.copyto, args=(b[lo:hi], a[lo:hi]))
              for lo, hi in spans[1:]]
        for t in ts:
            t.start()
        np.copyto(b[spans[0][0]:spans[0][1]], a[spans[0][0]:spans[0][1]])
        for t in ts:
            t.join()

    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        copy()
        ts.append(time.perf_counter() - t0)
    return 2 * nbytes / float(np.median(ts))


GOAL_COLUMNS = ["ring", "recursive_doubling", "ring out=", "ring messages"]


def goal(p: int = 4, nbytes: int = 64 * MIB, rounds: int = 7) -> str:
    """The 64 MiB local allreduce next to the copy bandwidth, interleaved rounds: each
    round measures both copies and every column (median of 3 calls); medians over rounds
    of the times and of the per-round ratios busbw / copy bandwidth ("best": the faster
    of the two copies of that round, i.e. the memory bandwidth the machine delivered)."""
    f = 2 * (p - 1) / p
    copies = {1: [], 2: []}
    res = {c: [] for c in GOAL_COLUMNS}
    for _ in range(rounds):
        for k in copies:
            copies[k].append(memory_bandwidth(k, reps=3))
        for col in GOAL_COLUMNS:
            res[col].append(max(tp.launch(lambda c, col=col: time_allreduce(c, nbytes, col, 3),
                                          p)))
    bw1, bw2 = (np.array(copies[k]) for k in (1, 2))
    lines = [f"## goal: {nbytes >> 20} MiB float32 allreduce on {p} local ranks, "
             f"{rounds} interleaved rounds (medians)",
             f"copy bandwidth (read + write): 1 thread {np.median(bw1) / 1e9:.2f} GB/s, "
             f"2 threads {np.median(bw2) / 1e9:.2f} GB/s",
             "| column | time ms | busbw GB/s | busbw / copy (1 thread) | "
             "busbw / copy (2 threads) | busbw / best copy | bytes moved / time / best copy |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    best = np.maximum(bw1, bw2)
    for col, ts in res.items():
        t = np.array(ts)
        busbw = f * nbytes / t
        moved = moved_bytes(col, p, nbytes)
        lines.append(f"| {col} | {np.median(t) * 1e3:.1f} | {np.median(busbw) / 1e9:.2f} | "
                     f"{np.median(busbw / bw1):.0%} | {np.median(busbw / bw2):.0%} | "
                     f"{np.median(busbw / best):.0%} | {np.median(moved / t / best):.0%} |")
    lines.append("bytes moved (n = message): shared path (p+1)n (every input read once, "
                 "the result written once); out= adds 2pn (each rank copies the result); "
                 "message-passing ring p n (3(p-1)/p + 2).")
    return "\n".join(lines)


def moved_bytes(column: str, p: int, n: int) -> float:
    """Bytes the column's algorithm must move through memory (at least)."""
    if column.endswith("messages"):
        return p * n * (3 * (p - 1) / p + 2)
    return (p + 1) * n + (2 * p * n if column.endswith("out=") else 0)


def model_rows(comm, sizes, algs):
    """Parameters measured and sweeps timed in 3 alternating rounds, medians."""
    return calibrate.predicted_vs_measured(comm, sizes, algs, reps=7, rounds=3)


def _gbs(per_byte: float) -> str:
    return f"{1 / per_byte / 1e9:.2f} GB/s" if per_byte > 0 else "inf"


def _spread(ratios) -> str:
    """Geometric mean and worst factor (max of r and 1/r) of measured/predicted."""
    r = np.array(ratios)
    worst = np.max(np.maximum(r, 1 / r))
    return f"geometric mean {np.exp(np.mean(np.log(r))):.2f}, worst {worst:.2f}x"


def model_table(title, p, fit) -> str:
    sa, sb, sg = fit["sweep_fit"]
    shared = (f"; shared-memory path: latency {fit['latency'] * 1e6:.1f} us (4-byte "
              f"allreduce), memory {_gbs(fit['beta_mem'])} (every rank copying 1/p of 256 MiB); "
              "at each size's working set, every rank adding at once: " + ", ".join(
                  f"{n} B {_gbs(b)}" for n, b in fit["beta_mem_at"].items())
              if fit["shared"] else "")
    lines = [f"## cost model vs measured: {title}, {p} ranks (medians of {fit['rounds']} "
             "rounds)",
             f"ping-pong fit: alpha {fit['alpha'] * 1e6:.2f} us, 1/beta {_gbs(fit['beta'])}; "
             f"timed adds: 1/gamma {_gbs(fit['gamma'])}; call overhead "
             f"{fit['overhead'] * 1e6:.1f} us; {fit['oversubscription']:.1f} ranks per core "
             f"({fit['cores']} cores){shared}. Diagnostic fit to this sweep: alpha "
             f"{sa * 1e6:.2f} us, 1/beta {_gbs(sb)}, 1/gamma {_gbs(sg)}",
             "ping-pong pieces: " + "; ".join(
                 f"up to {upto:g} B: alpha {a * 1e6:.2f} us, 1/beta {_gbs(b)}"
                 for upto, a, b in fit["pieces"]),
             "", "| ping-pong bytes | one line us | pieces us | measured us | "
             "measured/one line | measured/pieces |", "|---:|---:|---:|---:|---:|---:|"]
    for n, line, piece, meas in fit["pingpong_rows"]:
        lines.append(f"| {n} | {line * 1e6:.1f} | {piece * 1e6:.1f} | {meas * 1e6:.1f} | "
                     f"{meas / line:.2f} | {meas / piece:.2f} |")
    if fit["exchange"]:
        pp = dict(fit["pingpong"])
        lines += ["", "exchange (ring shift, every rank at once) pieces: " + "; ".join(
            f"up to {upto:g} B: alpha {a * 1e6:.2f} us, 1/beta {_gbs(b)}"
            for upto, a, b in fit["exchange_pieces"]) + "; step / ping-pong time: " + ", ".join(
            f"{n} B {t / pp[n]:.2f}" for n, t in fit["exchange"]) + "; gamma with every rank "
            f"adding / alone: {fit['gamma_concurrent'] / fit['gamma']:.2f}"]
    lines += ["", "| allreduce | bytes | plain a-b-g us | model us | exchange-calibrated us | "
              "sweep fit us | measured us | measured/plain | measured/model | "
              "measured/exchange |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for alg, n, plain, full, swept, meas, exch in fit["rows"]:
        lines.append(f"| {alg} | {n} | {plain * 1e6:.1f} | {full * 1e6:.1f} | "
                     f"{exch * 1e6:.1f} | {swept * 1e6:.1f} | {meas * 1e6:.1f} | "
                     f"{meas / plain:.2f} | {meas / full:.2f} | {meas / exch:.2f} |")
    rows = fit["rows"]
    pp = fit["pingpong_rows"]
    lines.append(f"\nmeasured/predicted, ping-pong one line: "
                 f"{_spread([r[3] / r[1] for r in pp])}; pieces: "
                 f"{_spread([r[3] / r[2] for r in pp])}\nallreduce plain a-b-g: "
                 f"{_spread([r[5] / r[2] for r in rows])}; model: "
                 f"{_spread([r[5] / r[3] for r in rows])}; exchange-calibrated: "
                 f"{_spread([r[5] / r[6] for r in rows])}")
    return "\n".join(lines)


def worker(sizes, model_only: bool = False):
    """Under mpiexec: MPI native, tilepy ring, mpi4py direct; then the model comparison."""
    def body(comm):
        res = {} if model_only else sweep(
            comm, sizes, ["native out=", "ring out=", "mpi4py.Allreduce"])
        res = {k.replace(" out=", ""): v for k, v in res.items()}
        fit = model_rows(comm, MODEL_SIZES, ["ring", "recursive_doubling"])
        return res, fit

    out = tp.launch(body)
    if tp.detect_backend() == "mpi" and os.environ.get("PMI_RANK", "0") == "0":
        print("RESULT " + json.dumps(out[0]), flush=True)


def run_mpi(p, sizes, quick, model_only=False):
    exe = Path(sys.executable).parent / "mpiexec"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
           "MALLOC_TRIM_THRESHOLD_": str(1 << 30), "TILEPY_COMM_TIMEOUT": "300"}
    cmd = [str(exe), "-n", str(p), sys.executable, __file__, "--worker"] + (
        ["--quick"] if quick else []) + (["--model"] if model_only else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise SystemExit(f"mpiexec failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[0][7:])


def overlap_demo(p: int = 2) -> str:
    """Exposed-communication fraction of the overlap engine on a toy backward pass."""
    from tilepy.parallel.overlap import BucketReducer

    params = [(f"w{i}", (512, 512), np.float32) for i in range(16)]  # 1 MiB each

    def body(comm):
        red = BucketReducer(comm, params, cap_bytes=MIB)
        g = np.ones((512, 512), np.float32)
        a = np.ones(1 << 20)
        t0 = time.perf_counter()
        for name, _, _ in reversed(params):
            with red.timeline.span(f"backward {name}"):
                for _ in range(10):
                    np.sqrt(a, out=a)  # stands for backward compute (releases the GIL)
            red.ready(name, g)
        red.wait()
        step = time.perf_counter() - t0
        red.close()
        return red.exposed_fraction(), red.exposed, step, red.timeline.busy("comm")

    frac, exposed, step, busy = tp.launch(body, p)[0]
    return (f"overlap engine, {p} local ranks, 16 x 1 MiB gradients in 1 MiB buckets: step "
            f"{step * 1e3:.1f} ms, communication busy {busy * 1e3:.1f} ms, exposed "
            f"{exposed * 1e3:.1f} ms (fraction {frac:.2f})")


def local_model(p: int) -> str:
    body = lambda c: model_rows(c, MODEL_SIZES, ["ring", "recursive_doubling"])  # noqa: E731
    return model_table("local (shared memory)", p, tp.launch(body, p)[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--goal", action="store_true", help="only the 64 MiB goal table")
    ap.add_argument("--model", action="store_true", help="only the cost-model tables")
    args = ap.parse_args()
    sizes = QUICK if args.quick else SIZES
    if args.worker:
        return worker(sizes, args.model)
    if not args.model:
        print(goal(rounds=3 if args.quick else 7) + "\n")
    if args.goal:
        return
    for p in (2, 3, 4):
        if not args.model:
            cols = ["ring", "rabenseifner", "tree", "ring messages"]
            res = tp.launch(lambda c, cols=cols: sweep(c, sizes, cols), p)[0]
            print(table("local backend (threads)", p, sizes, res) + "\n")
        print(local_model(p) + "\n")
    if not args.model:
        print(overlap_demo() + "\n")
    if args.no_mpi:
        return
    for p in (2, 3, 4):
        res, fit = run_mpi(p, sizes, args.quick, args.model)
        if res:
            print(table("mpi backend (MPICH)", p, sizes, res))
            ratio = res["ring"][-1] / res["native"][-1]
            print(f"\ntilepy ring / MPI native time at {sizes[-1]} B: {ratio:.2f}x\n")
        print(model_table("mpi (tilepy's algorithms over MPI messages)", p, fit) + "\n")


if __name__ == "__main__":
    main()
