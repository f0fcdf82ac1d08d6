"""The `tilepy` command: inspect kernels from the shell.

`tilepy ir FILE.py:NAME [ARGS...]` prints a kernel's IR (NAME is a @T.prim_func kernel or a
@tilepy.jit factory, called with the build-time ARGS given as Python literals);
`tilepy jit-compile MODULE...` fills the JIT's disk cache with every kernel the modules
define (ahead-of-time mode); `tilepy version` prints versions. This module only parses
arguments and prints.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys


def _load(target: str):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit(f"tilepy: expected FILE.py:NAME, got {target!r}")
    spec = importlib.util.spec_from_file_location("_tilepy_cli_module", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"tilepy: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"tilepy: {path} has no {name!r}") from None


def _cmd_ir(args) -> int:
    from tilepy.kernel import JitFunction, Kernel

    obj = _load(args.target)
    values = [ast.literal_eval(a) for a in args.args]
    if isinstance(obj, JitFunction):
        obj = obj.build(*values)
    if not isinstance(obj, Kernel):
        raise SystemExit(f"tilepy: {args.target} is not a kernel")
    print(obj.ir)
    return 0


def _cmd_jit_compile(args) -> int:
    from tilepy.jit.aot import main as aot_main

    return aot_main(args.modules)


def _cmd_version(args) -> int:
    import ml_dtypes
    import numpy

    import tilepy

    print(f"tilepy {tilepy.__version__}, numpy {numpy.__version__}, "
          f"ml_dtypes {ml_dtypes.__version__}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilepy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_ir = sub.add_parser("ir", help="print a kernel's IR")
    p_ir.add_argument("target", help="FILE.py:NAME")
    p_ir.add_argument("args", nargs="*", help="build-time arguments (Python literals)")
    p_ir.set_defaults(run=_cmd_ir)
    p_aot = sub.add_parser("jit-compile", help="compile modules' kernels into the disk cache")
    p_aot.add_argument("modules", nargs="+", help="importable module names")
    p_aot.set_defaults(run=_cmd_jit_compile)
    sub.add_parser("version", help="print versions").set_defaults(run=_cmd_version)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
