"""nccl-tests-style allreduce tables for tilepy.parallel, side by side with mpi4py.

  python bench/collectives.py            # local + mpi at 2, 3 and 4 ranks, + cost model
  python bench/collectives.py --quick    # fewer sizes, for a smoke run
Columns: size, time (median us), algbw = bytes / time, busbw = algbw * 2(p-1)/p (GB/s).
MPI rows come from `mpiexec -n p python bench/collectives.py --worker`, run by this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import tilepy.parallel as tp
from tilepy.parallel import calibrate

MIB = 1 << 20
SIZES = [8, 64, 512, 4096, 32768, 262144, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
QUICK = [8, 4096, MIB, 16 * MIB]
MODEL_SIZES = [4096, 256 << 10, 4 * MIB, 16 * MIB]


def reps_for(nbytes: int) -> int:
    return 5 if nbytes >= 16 * MIB else 10 if nbytes >= MIB else 30


def time_allreduce(comm, nbytes: int, alg: str, mpi4py_direct: bool = False) -> float:
    x = np.ones(max(1, nbytes // 4), np.float32)
    out = np.empty_like(x)
    if mpi4py_direct:
        from mpi4py import MPI
        call = lambda: comm.mcomm.Allreduce(x, out, MPI.SUM)
    else:
        call = lambda: comm.allreduce(x, algorithm=alg, out=out)
    call()
    ts = []
    for _ in range(reps_for(nbytes)):
        comm.barrier()
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def sweep(comm, sizes, algs):
    """{column: [seconds per size]}; the max over ranks of each median (the job's time)."""
    res = {}
    for alg in algs:
        direct = alg == "mpi4py.Allreduce"
        ts = [time_allreduce(comm, n, alg, direct) for n in sizes]
        all_ts = comm.allgather(np.array(ts))
        res[alg] = all_ts.max(axis=0).tolist()
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


def memory_bandwidth(nbytes: int = 256 * MIB) -> float:
    """numpy copy, bytes read + written per second (one thread), median of 5."""
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(time.perf_counter() - t0)
    return 2 * nbytes / float(np.median(ts))


def model_rows(comm, sizes, algs):
    fit = calibrate.predicted_vs_measured(comm, sizes, algs, reps=5)
    return fit


def _gbs(per_byte: float) -> str:
    return f"{1 / per_byte / 1e9:.2f} GB/s" if per_byte > 0 else "inf"


def model_table(title, p, fit) -> str:
    sa, sb, sg = fit["sweep_fit"]
    lines = [f"## cost model vs measured: {title}, {p} ranks",
             f"ping-pong fit: alpha {fit['alpha'] * 1e6:.2f} us, 1/beta {_gbs(fit['beta'])}; "
             f"timed adds: 1/gamma {_gbs(fit['gamma'])}. Sweep fit: alpha {sa * 1e6:.2f} us, "
             f"1/beta {_gbs(sb)}, 1/gamma {_gbs(sg)}",
             "| algorithm | size | predicted (ping-pong) us | predicted (sweep fit) us | "
             "measured us | measured/predicted (ping-pong) |",
             "|---|---:|---:|---:|---:|---:|"]
    for alg, n, pred, pred_sweep, meas in fit["rows"]:
        lines.append(f"| {alg} | {n} | {pred * 1e6:.1f} | {pred_sweep * 1e6:.1f} | "
                     f"{meas * 1e6:.1f} | {meas / pred if pred else float('nan'):.2f} |")
    return "\n".join(lines)


def worker(sizes):
    """Under mpiexec: MPI native, tilepy ring, mpi4py direct; then the model comparison."""
    def body(comm):
        res = sweep(comm, sizes, ["native", "ring", "mpi4py.Allreduce"])
        fit = model_rows(comm, MODEL_SIZES, ["ring", "recursive_doubling"])
        return res, fit

    out = tp.launch(body)
    if tp.detect_backend() == "mpi" and os.environ.get("PMI_RANK", "0") == "0":
        print("RESULT " + json.dumps(out[0]), flush=True)


def run_mpi(p, sizes, quick):
    exe = Path(sys.executable).parent / "mpiexec"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
           "MALLOC_TRIM_THRESHOLD_": str(1 << 30), "TILEPY_COMM_TIMEOUT": "300"}
    cmd = [str(exe), "-n", str(p), sys.executable, __file__, "--worker"] + (
        ["--quick"] if quick else [])
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--no-mpi", action="store_true")
    args = ap.parse_args()
    sizes = QUICK if args.quick else SIZES
    if args.worker:
        return worker(sizes)
    bw = memory_bandwidth()
    print(f"memory bandwidth (numpy copy, read+write, 1 thread): {bw / 1e9:.2f} GB/s\n")
    for p in (2, 3, 4):
        res = tp.launch(lambda c: sweep(c, sizes, ["ring", "rabenseifner", "tree"]), p)[0]
        print(table("local backend (threads)", p, sizes, res))
        big, n = res["ring"][-1], sizes[-1]
        busbw = n / big * 2 * (p - 1) / p
        traffic = p * n * (3 * (p - 1) / p + 2)  # adds read 2 + write 1, final copy r + w
        print(f"\nlocal ring at {n} B: busbw {busbw / 1e9:.3f} GB/s = {busbw / bw:.0%} of "
              f"memory bandwidth; memory traffic of the algorithm {traffic / big / 1e9:.2f} "
              f"GB/s = {traffic / big / bw:.0%} of it\n")
        fit = tp.launch(lambda c: model_rows(c, MODEL_SIZES, ["ring", "recursive_doubling"]),
                        p)[0]
        print(model_table("local", p, fit) + "\n")
    print(overlap_demo() + "\n")
    if args.no_mpi:
        return
    for p in (2, 3, 4):
        res, fit = run_mpi(p, sizes, args.quick)
        print(table("mpi backend (MPICH)", p, sizes, res))
        ratio = res["ring"][-1] / res["native"][-1]
        print(f"\ntilepy ring / MPI native time at {sizes[-1]} B: {ratio:.2f}x\n")
        print(model_table("mpi", p, fit) + "\n")


if __name__ == "__main__":
    main()
