"""The library's whole performance table in one run: every `bench/lib_*.py` module's rows
(each checks its outputs against their derived bound before timing them), side by side
with their peers, as one markdown table.

    make bench-lib            (or: bench/library_bench.py [--quick] [--only conv,attn])

Ratios are peer time / tilepy time: above 1 tilepy is faster. A module whose rows raise (a
failed check) is reported as such and the run exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _modules(only: set[str] | None):
    for path in sorted(HERE.glob("lib_*.py")):
        area = path.stem[4:]
        if only and area not in only:
            continue
        spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield area, mod


def _ratio(peer, mine) -> str:
    return f"{peer / mine:.2f}x" if peer and mine else "-"


def _ms(t) -> str:
    return f"{t * 1e3:.2f}" if t else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--only", help="comma-separated areas (the * of bench/lib_*.py)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    print(f"# tilepy library benchmark ({os.cpu_count()} CPUs, NUMBA_NUM_THREADS="
          f"{os.environ.get('NUMBA_NUM_THREADS', 'default')})\n")
    print("| area | kernel | check | fast ms | exact ms | peer | peer ms | peer/fast "
          "| peer/exact | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = []
    for area, mod in _modules(only):
        try:
            rows = mod.rows(quick=args.quick)
        except Exception:  # a failed check or a broken module: report it, keep going
            failed.append(area)
            print(f"| {area} | (failed) | {traceback.format_exc(limit=1).splitlines()[-1]} "
                  f"| | | | | | | |", flush=True)
            continue
        for r in rows:
            print(f"| {area} | {r['kernel']} | {r['check']} | {_ms(r.get('fast'))} "
                  f"| {_ms(r.get('exact'))} | {r['peer_name']} | {_ms(r.get('peer'))} "
                  f"| {_ratio(r.get('peer'), r.get('fast'))} "
                  f"| {_ratio(r.get('peer'), r.get('exact'))} | {r.get('goal', '')} |",
                  flush=True)
            if r.get("note"):
                print(f"|  | note: {r['note']} | | | | | | | | |")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
