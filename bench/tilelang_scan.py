"""Static scan of TileLang programs: the names each uses from `tilelang`, `tilelang.language`
and `tvm` that tilepy's stand-in (tilepy.compat) lacks, per program and by number of
programs. Imports nothing of the programs (their source is parsed, not run).

    .venv/bin/python bench/tilelang_scan.py FOLDER/*.py
"""

from __future__ import annotations

import ast
import collections
import importlib
import sys

import tilepy.compat

ROOTS = ("tilelang", "tvm")


def resolves(path: str) -> bool:
    """Whether dotted `path` names a module or an attribute of one in the stand-in."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            if not hasattr(obj, p):
                return False
            obj = getattr(obj, p)
        return True
    return False


def _imports(tree: ast.AST) -> tuple[dict[str, str], set[str]]:
    """Local name -> dotted stand-in path, and the imports that do not resolve."""
    alias: dict[str, str] = {}
    missing: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in (a for a in n.names if a.name.split(".")[0] in ROOTS):
                if not resolves(a.name):
                    missing.add(a.name)
                alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ROOTS:
            for a in n.names:
                full = n.module if a.name == "*" else f"{n.module}.{a.name}"
                if not resolves(full):
                    missing.add(full)
                if a.name != "*":
                    alias[a.asname or a.name] = full
    return alias, missing


def scan(source: str) -> set[str]:
    """The dotted names `source` uses that the stand-in lacks."""
    tree = ast.parse(source)
    alias, missing = _imports(tree)
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute):
            continue
        chain, x = [], n
        while isinstance(x, ast.Attribute):
            chain.append(x.attr)
            x = x.value
        if isinstance(x, ast.Name) and x.id in alias:
            full = f"{alias[x.id]}.{chain[-1]}"
            if not resolves(full):
                missing.add(full)
    return missing


def main(paths: list[str]) -> int:
    tilepy.compat.install(force=True)
    counts: collections.Counter = collections.Counter()
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        try:
            with open(path) as f:
                missing = scan(f.read())
        except SyntaxError as e:
            print(f"{name}: does not parse ({e.msg}, line {e.lineno})")
            continue
        counts.update(missing)
        print(f"{name}: {', '.join(sorted(missing)) or '-'}")
    print("\nmissing names by number of programs:")
    for key, n in counts.most_common():
        print(f"  {n:3}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
