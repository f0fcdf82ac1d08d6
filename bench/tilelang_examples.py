"""Run TileLang example programs through tilepy's compatibility mode and report which pass
their own checks, on the interpreter and the JIT, and the first blocker of the others.

    .venv/bin/python bench/tilelang_examples.py FOLDER [--timeout S] [--backends interp,jit]
        [--args FILE] [--only a.py,b.py] [--json OUT]

Each FOLDER/*.py runs as `tilepy run --tilelang --cuda-to-cpu --backend B prog.py [ARGS]` in
its own process. A program passes when it exits 0 and prints no failure verdict (a few of
TileLang's examples catch their own assertion and print a cross or "FAILED" instead).
Outcomes: pass, check (its own check failed: an AssertionError or a printed verdict), error
(anything else, with the error's last line), timeout (with the last line the program had
printed: a timeout in a benchmark after the checks passed shows it). `--args FILE` gives
the command-line arguments of some programs, one `prog.py ARGS...` a line (`#` comments),
to run GPU-sized examples at CPU sizes through their own flags. The programs are not part
of this repository.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys
import time

_EXC = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit)|AssertionError)\b.*")
_VERDICT = re.compile(r"❌|\bFAILED\b|[Mm]ismatch|Failed some")


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


def outcome(rc: int, out: str, why: str) -> tuple[str, str]:
    """Classify a run: ('pass'|'check'|'error'|'timeout', first blocker or '')."""
    if rc == 0:
        bad = [ln.strip() for ln in out.splitlines() if _VERDICT.search(ln)]
        return ("check", "printed: " + bad[0][:120]) if bad else ("pass", "")
    if why == "timeout":
        return "timeout", why
    return ("check" if why.startswith("AssertionError") else "error"), why


def run_one(path: str, backend: str, timeout: float, extra: list[str]) -> tuple[str, float, str]:
    cmd = [sys.executable, "-m", "tilepy.cli", "run", "--tilelang", "--cuda-to-cpu",
           "--backend", backend, path, *(["--", *extra] if extra else [])]
    env = {**os.environ, "TILEPY_QUIET": "1"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=os.path.dirname(path))
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, _text(e.stdout), ""
    kind, why = outcome(rc, out, blocker(err, rc) if rc else "")
    if kind == "timeout" and out.strip():  # what it had printed: its checks may have passed
        why += f" (last output: {out.strip().splitlines()[-1][:80]})"
    return kind, time.perf_counter() - t0, why


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def read_args(path: str | None) -> dict[str, list[str]]:
    """Per-program command-line arguments from an `--args` file."""
    table: dict[str, list[str]] = {}
    if path:
        with open(path) as f:
            for ln in f:
                words = shlex.split(ln, comments=True)
                if words:
                    table[words[0]] = words[1:]
    return table


def blocker_key(why: str) -> str:
    """Group blockers that differ only in numbers or the text after the message's subject."""
    why = re.sub(r"\S+\.py:\d+: ", "", why)
    if why.startswith("timeout"):
        return "timeout"
    if ":" not in why:
        return why
    head, rest = why.split(":", 1)
    return re.sub(r"\d+", "N", head + ": " + rest.strip()[:70])


def report(rows: list[dict], backends: list[str]) -> None:
    """Counts per backend and outcome, then the first blockers, most common first."""
    print()
    for b in backends:
        c = collections.Counter(r[b]["kind"] for r in rows)
        print(f"{b}: {c['pass']} of {len(rows)} pass, {c['check']} fail their own check, "
              f"{c['error']} error, {c['timeout']} time out")
    blockers = collections.Counter(blocker_key(r["first"]) for r in rows if r["first"])
    print("first blockers, most common first:")
    for why, n in blockers.most_common():
        print(f"  {n:3}  {why}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--backends", default="interp,jit")
    ap.add_argument("--args", help="file of `prog.py ARGS...` lines")
    ap.add_argument("--only", help="comma-separated program names to run")
    ap.add_argument("--json", help="write the per-program results to this file")
    args = ap.parse_args(argv)
    backends, extra = args.backends.split(","), read_args(args.args)
    names = sorted(f for f in os.listdir(args.folder) if f.endswith(".py"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    rows = []
    print(f"{'program':52} " + " ".join(f"{b:>16}" for b in backends))
    for name in names:
        row: dict = {"program": name, "args": extra.get(name, []), "first": ""}
        for b in backends:
            kind, secs, why = run_one(os.path.abspath(os.path.join(args.folder, name)), b,
                                      args.timeout, row["args"])
            row[b] = {"kind": kind, "secs": round(secs, 1), "why": why}
            row["first"] = row["first"] or why
        rows.append(row)
        print(f"{name:52} " + " ".join(f"{row[b]['kind']:>7} {row[b]['secs']:7.1f}s"
                                       for b in backends)
              + (f"  {row['first']}" if row["first"] else ""), flush=True)
    report(rows, backends)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
