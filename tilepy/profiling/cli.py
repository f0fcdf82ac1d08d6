"""`tilepy profile [--trace T.json] [--roofline R.png] [--backend B] PROG.py [ARGS...]`:
run a Python program as `python PROG.py ARGS` would, inside a profiling session, then print
the launch table (to stderr, so the program's own output stays clean) and write the files.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="run a Python program and profile its kernel launches")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--roofline", metavar="FILE.png", help="write a roofline plot (matplotlib)")
    p.add_argument("--backend", choices=("jit", "interp", "py"), default=None,
                   help="where kernels run (default: TILEPY_BACKEND, else jit)")
    p.add_argument("--tilelang", action="store_true",
                   help="`import tilelang` gives tilepy's stand-in (as `tilepy run --tilelang`)")
    p.add_argument("program", help="a .py file")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the program's own arguments")
    p.set_defaults(run=cmd_profile)


def cmd_profile(args) -> int:
    from tilepy.profiling.session import profile

    if not os.path.isfile(args.program):
        print(f"tilepy: no such file: {args.program}", file=sys.stderr)
        return 2
    if args.tilelang:
        from tilepy import compat

        compat.install()
    if args.backend:
        os.environ["TILEPY_BACKEND"] = args.backend
    path = os.path.abspath(args.program)
    sys.argv = [path, *args.args]
    sys.path.insert(0, os.path.dirname(path))
    status = 0
    with profile() as p:
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # noqa: BLE001 - the program failed: show it, report what ran
            traceback.print_exc()
            status = 1
    print(p.table(), file=sys.stderr)
    if args.trace:
        p.trace(args.trace)
        print(f"tilepy: trace written to {args.trace}", file=sys.stderr)
    if args.roofline:
        p.roofline(args.roofline)
        print(f"tilepy: roofline written to {args.roofline}", file=sys.stderr)
    return status
