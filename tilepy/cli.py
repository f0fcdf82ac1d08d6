"""The `tilepy` command: inspect and precompile kernels from the shell.

`tilepy ir TARGET [ARGS...]` prints a kernel's IR, `tilepy jit-compile MODULE|FILE.py...`
fills the JIT's disk cache, `tilepy version` prints versions, `tilepy run [--tilelang]
PROG.py` runs a (TileLang) program on tilepy, `tilepy profile PROG.py` runs one and
reports its kernel launches (tilepy/profiling/cli.py). A command-line mistake exits
with status 2 and one line, an error in a kernel with 1. Only loads, parses and prints.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback

import ml_dtypes
import numpy

from tilepy import __version__
from tilepy.boundary import is_internal
from tilepy.errors import TilepyError
from tilepy.ir.printer import format_func
from tilepy.ir.stmt import PrimFunc
from tilepy.kernel import JitFunction, Kernel


class UsageError(Exception):
    """A mistake on the command line: one line, exit status 2."""


class UserCodeError(Exception):
    """The user's module raised while it was imported (its traceback is printed)."""


# ------------------------------------------------------------------ loading


def _import(where: str):
    """The module `where` names (a .py file or a module name), imported from the current
    folder. Its `__name__` is never "__main__"."""
    sys.path.insert(0, os.getcwd())
    if where.endswith(".py") or os.sep in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise UsageError(f"no such file: {where}")
        sys.path.insert(0, os.path.dirname(path))  # as Python does for a script
        stem = os.path.splitext(os.path.basename(path))[0]
        name = stem if stem.isidentifier() and stem not in sys.modules else "_tilepy_cli_module"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _run_user_code(lambda: spec.loader.exec_module(module), where)
        return module
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(f"no module named {where!r} in the current folder or installed "
                         "(give a module name, or a path ending in .py)")
    return _run_user_code(lambda: importlib.import_module(where), where)


def _run_user_code(thunk, where: str):
    """Import the user's module; an exception it raises is shown with its own frames."""
    try:
        return thunk()
    except (TilepyError, SystemExit, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - the user's own code failed: show where
        frames = [f for f in traceback.extract_tb(err.__traceback__)
                  if not f.filename.startswith("<frozen ") and not is_internal(f.filename)]
        raise UserCodeError(
            f"importing {where} raised an error\nTraceback (most recent call last):\n"
            + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(err), err)).rstrip()) from None


def _target(target: str):
    where, _, name = target.rpartition(":")
    if not where or not name.isidentifier():
        raise UsageError(f"expected FILE.py:NAME or MODULE:NAME; got {target!r}")
    module = _import(where)
    if not hasattr(module, name):
        names = [n for n, v in vars(module).items() if _is_kernel(v)]
        known = f"; its kernels: {', '.join(names)}" if names else ""
        raise UsageError(f"{where} has no {name!r}{known}")
    return getattr(module, name)


def _is_kernel(v) -> bool:
    return isinstance(v, (JitFunction, Kernel))


def _literals(texts: list[str]) -> tuple[list, dict]:
    """Positional and NAME=VALUE arguments, each a Python literal."""
    pos, kw = [], {}
    for text in texts:
        m = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", text, re.S)
        try:
            value = ast.literal_eval(m.group(2) if m else text)
        except (ValueError, SyntaxError):
            raise UsageError(f"argument {text!r} is not a Python literal (numbers, "
                             "True/False/None, tuples, and quoted strings such as "
                             "\"'float16'\")") from None
        if m:
            kw[m.group(1)] = value
        else:
            pos.append(value)
    return pos, kw


# ------------------------------------------------------------------ building


def _build(obj, what: str, pos: list, kw: dict):
    """The Kernel `obj` gives for these build-time arguments."""
    if isinstance(obj, Kernel):
        if pos or kw:
            raise UsageError(f"{what} is a built kernel: it takes no build-time arguments")
        return obj
    if not isinstance(obj, JitFunction):
        raise UsageError(f"{what} is a {type(obj).__name__}, not a kernel (a @T.prim_func "
                         "kernel or a @tilepy.jit function)")
    arrays = obj.array_params()
    args = _bind(obj, arrays, pos, kw, what)
    return obj.build(**args)


def _bind(obj, arrays: list[str], pos: list, kw: dict, what: str) -> dict:
    """Keyword arguments for `obj.build`: arrays as None, ARGS in the other parameters."""
    sig = inspect.signature(obj.fn)
    static = [p for p in sig.parameters if p not in arrays]
    if len(pos) > len(static):
        raise UsageError(f"{what} takes {len(static)} build-time argument(s) "
                         f"({', '.join(static)}); got {len(pos)}")
    args = {name: None for name in arrays}
    args.update(zip(static, pos))
    for name, value in kw.items():
        if name not in static:
            raise UsageError(f"{what} has no build-time parameter {name!r} (it has: "
                             f"{', '.join(static) or 'none'})")
        args[name] = value
    try:
        sig.bind(**args)
    except TypeError as err:
        raise UsageError(f"{what}: {err}") from None
    return args


def _required(obj) -> list[str]:
    """The build-time parameters of a @tilepy.jit function that have no default."""
    arrays = obj.array_params()
    return [p.name for p in inspect.signature(obj.fn).parameters.values()
            if p.default is p.empty and p.name not in arrays
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


# ------------------------------------------------------------------ commands


def _cmd_ir(args) -> int:
    """`tilepy ir TARGET [ARGS...]`: TARGET is FILE.py:NAME or MODULE:NAME, NAME a
    @T.prim_func kernel or a @tilepy.jit function (a lazy factory, or an eager kernel,
    whose arrays are not needed) built with ARGS."""
    obj = _target(args.target)
    pos, kw = _literals(args.args)
    func = obj if isinstance(obj, PrimFunc) else _build(obj, args.target, pos, kw).func
    if args.after:
        from tilepy.jit import passes  # the JIT layer loads lazily (DESIGN.md, Layers)

        func = passes.run(func, fuse=args.fast, upto=args.after)
    print(format_func(func))
    return 0


def _cmd_jit_compile(args) -> int:
    """`tilepy jit-compile MODULE|FILE.py...`: compile the kernels each module defines into
    the disk cache (ahead-of-time mode) and report each; status 1 if one could not be."""
    from tilepy.jit.aot import precompile  # the JIT layer loads lazily (DESIGN.md, Layers)

    status = 0
    for where in args.modules:
        module = _import(where)
        items, problems = _aot_items(module)
        for label, item in items:
            (_, secs, path), = precompile([item])
            print(f"{where}: compiled {label} in {secs:.2f} s -> {path}")
        for problem in problems:
            print(f"tilepy: {where}: {problem}", file=sys.stderr)
        if not items and not problems:
            print(f"tilepy: {where}: found no kernels (no @T.prim_func kernel, @tilepy.jit "
                  "function or __tilepy_aot__ list at its top level)", file=sys.stderr)
        status = status or int(bool(problems) or not items)
    return status


def _aot_items(module) -> tuple[list[tuple[str, object]], list[str]]:
    """(label, kernel) pairs to compile, and what could not be compiled and why: module-level
    kernels, `__tilepy_aot__`, and each @tilepy.jit function of the module (the kernels its
    import built, else its build with default arguments)."""
    from tilepy.jit.aot import kernels_of  # the JIT layer loads lazily (DESIGN.md, Layers)

    labels = {id(getattr(v, "func", v)): n for n, v in vars(module).items()}
    items = [(labels.get(id(f), f.name), f) for f in kernels_of(module)]
    problems = []
    for name, obj in vars(module).items():
        if not isinstance(obj, JitFunction) or obj.fn.__module__ != module.__name__:
            continue
        built = obj.built()
        if not built:
            needed = _required(obj)
            if needed:
                problems.append(
                    f"{name} needs build-time arguments ({', '.join(needed)}); name the "
                    f"kernels to compile in the module: __tilepy_aot__ = [{name}(...)]")
                continue
            built = [_build(obj, name, [], {})]
        seen = {id(f) for _, f in items}
        items += [(name, k.func) for k in built if id(k.func) not in seen]
    return items, problems


def _cmd_version(args) -> int:
    print(f"tilepy {__version__}, numpy {numpy.__version__}, "
          f"ml_dtypes {ml_dtypes.__version__}")
    return 0


def _cmd_validate(args) -> int:
    """`tilepy validate FILE.npz [--op OP] [--accumulate MODEL] [--tile BM,BN]`: the .npz
    holds `out` and the inputs by role (and `meta`, as tests/data/gpu/capture.py writes);
    prints the report; status 1 if it fails."""
    from tilepy.validation import load_case, validate

    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file}")
    out, op, inputs, config = load_case(args.file)
    op = args.op or op
    if not op:
        raise UsageError(f"{args.file} names no op: pass --op (gemm, softmax, ...)")
    for key in ("accumulate", "compute", "output"):
        if getattr(args, key):
            config[key] = getattr(args, key)
    if args.tile:
        try:
            config["tile"] = tuple(int(t) for t in args.tile.split(","))
        except ValueError:
            raise UsageError(f"--tile takes BM,BN (integers), got {args.tile!r}") from None
    from tilepy.errors import ValidationError

    try:
        report = validate(out, op, inputs, **config)
    except ValidationError as err:  # a mistake in the options: no source line to show
        raise UsageError(err.message + (f" ({err.hint})" if err.hint else "")) from None
    print(report)
    return 0 if report.passed else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilepy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_ir = sub.add_parser("ir", help="print a kernel's IR")
    p_ir.add_argument("target", help="FILE.py:NAME or MODULE:NAME")
    p_ir.add_argument("args", nargs="*", help="build-time arguments (Python literals, "
                                              "positional or NAME=VALUE)")
    p_ir.add_argument("--after", metavar="PASS", help="the IR after this JIT pass "
                      "(initfill, fusion, hoist, guards) and those before it")
    p_ir.add_argument("--fast", action="store_true", help="with --after: fast mode's "
                      "pipeline (fusion runs)")
    p_ir.set_defaults(run=_cmd_ir)
    p_aot = sub.add_parser("jit-compile", help="compile modules' kernels into the disk cache")
    p_aot.add_argument("modules", nargs="+", help="module names or .py files")
    p_aot.set_defaults(run=_cmd_jit_compile)
    sub.add_parser("version", help="print versions").set_defaults(run=_cmd_version)
    p_val = sub.add_parser("validate", help="check a backend's output saved in an .npz")
    p_val.add_argument("file", help="FILE.npz with `out`, the inputs by role, optional meta")
    p_val.add_argument("--op", help="gemm, scaled_gemm, softmax, layernorm, rmsnorm, "
                                    "attention, conv2d, cross_entropy")
    p_val.add_argument("--accumulate", help="fp32, tf32, fp16, bf16, fast, promote, exact")
    p_val.add_argument("--compute", help="the compute dtype (default float32)")
    p_val.add_argument("--output", help="the output's dtype when stored as bit patterns")
    p_val.add_argument("--tile", help="BM,BN: tiles named for the worst elements")
    p_val.set_defaults(run=_cmd_validate)

    from tilepy.compat.runner import add_parser  # `tilepy run [--tilelang] PROG.py`

    add_parser(sub)
    from tilepy.profiling.cli import add_parser as add_profile  # `tilepy profile PROG.py`

    add_profile(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as err:
        print(f"tilepy: {err}", file=sys.stderr)
        return 2
    except (TilepyError, UserCodeError) as err:
        print(f"tilepy: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
