"""`tilepy run [--tilelang] [--cuda-to-cpu] [--backend B] PROG.py [ARGS...]`: run a Python
program as `python PROG.py ARGS` would, with TileLang's imports resolved to tilepy (with
--tilelang) and its kernels on backend B. Owns only the set-up around the program.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a Python program (a TileLang one with --tilelang)")
    p.add_argument("--tilelang", action="store_true",
                   help="`import tilelang` / `import tvm` give tilepy's stand-ins")
    p.add_argument("--force", action="store_true",
                   help="with --tilelang: even over a real TileLang installation")
    p.add_argument("--cuda-to-cpu", action="store_true",
                   help="torch tensors created on cuda are created on the CPU")
    p.add_argument("--backend", choices=("jit", "interp", "py"), default=None,
                   help="where kernels run (default: TILEPY_BACKEND, else jit)")
    p.add_argument("--strict", action="store_true",
                   help="out-of-range global element accesses raise, and on the "
                        "interpreter reads of unwritten fragment elements (TILEPY_STRICT=1)")
    p.add_argument("--autotune-configs", metavar="LIMIT",
                   help="TileLang autotuning measures only these configs: first, N (the "
                        "first N) or random:N[:SEED]; default all (TILEPY_AUTOTUNE_CONFIGS)")
    p.add_argument("program", help="a .py file")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="the program's own arguments, options included")
    p.set_defaults(run=cmd_run)


def cmd_run(args) -> int:
    from tilepy import compat

    if not os.path.isfile(args.program):
        print(f"tilepy: no such file: {args.program}", file=sys.stderr)
        return 2
    if args.autotune_configs is not None:
        from tilepy.compat.tunelimit import ENV, parse

        parse(args.autotune_configs)  # a bad value stops here, before anything is set up
        os.environ[ENV] = args.autotune_configs
    if args.tilelang and not compat.install(force=args.force, cuda_to_cpu=args.cuda_to_cpu):
        print("tilepy: a real TileLang is installed; pass --force to run on tilepy anyway",
              file=sys.stderr)
        return 2
    if args.cuda_to_cpu and not args.tilelang:
        from tilepy.compat.cuda_to_cpu import patch

        patch()
    if args.strict:
        os.environ["TILEPY_STRICT"] = "1"
    if args.backend:
        os.environ["TILEPY_BACKEND"] = args.backend
    path = os.path.abspath(args.program)
    sys.argv = [path, *args.args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:  # noqa: BLE001 - the program failed: show it as Python would
        traceback.print_exc()
        return 1
    return 0
