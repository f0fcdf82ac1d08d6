"""Run TileLang example programs through tilepy's compatibility mode and report which pass
their own checks, on the interpreter and the JIT, and the first blocker of the others.

    .venv/bin/python bench/tilelang_examples.py FOLDER [--timeout S] [--backends interp,jit]

Each FOLDER/*.py runs as `tilepy run --tilelang --cuda-to-cpu --backend B prog.py` in its
own process (a program passes when it exits 0: TileLang's examples assert their results
against a torch reference). The programs are not part of this repository.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

_EXC = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit)|AssertionError)\b.*")


def blocker(stderr: str, rc: int) -> str:
    """The program's first blocker: the last exception line (shortened), else its status."""
    if rc in (124, -9):
        return "timeout"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _EXC.match(ln)
        if m:
            return re.sub(r"/\S+/", "", ln)[:160]
    for ln in reversed(lines):
        if ln.startswith("tilepy:"):
            return ln[:160]
    return f"exit status {rc}"


def run_one(path: str, backend: str, timeout: float) -> tuple[int, float, str]:
    cmd = [sys.executable, "-m", "tilepy.cli", "run", "--tilelang", "--cuda-to-cpu",
           "--backend", backend, path]
    env = {**os.environ, "TILEPY_QUIET": "1"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=os.path.dirname(path))
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = 124, ""
    return rc, time.perf_counter() - t0, blocker(err, rc) if rc else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--backends", default="interp,jit")
    args = ap.parse_args(argv)
    backends = args.backends.split(",")
    progs = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder)
                   if f.endswith(".py"))
    passed = collections.Counter()
    blockers: collections.Counter = collections.Counter()
    print(f"{'program':48} " + " ".join(f"{b:>14}" for b in backends))
    for path in progs:
        cells, first = [], None
        for b in backends:
            rc, secs, why = run_one(os.path.abspath(path), b, args.timeout)
            cells.append(f"{'pass' if rc == 0 else 'FAIL'} {secs:7.1f}s")
            passed[b] += rc == 0
            first = first or why
        if first:
            blockers[re.sub(r"\d+", "N", first.split(":")[0] + ": " + first.split(":", 1)[-1]
                            .strip()[:70]) if ":" in first else first] += 1
        print(f"{os.path.basename(path):48} " + " ".join(f"{c:>14}" for c in cells)
              + (f"  {first}" if first else ""))
    print()
    for b in backends:
        print(f"{b}: {passed[b]} of {len(progs)} pass")
    print("first blockers, most common first:")
    for why, n in blockers.most_common():
        print(f"  {n:3}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
