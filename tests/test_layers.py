"""The layer contract of DESIGN.md ("Layers"): which layer may import which.

The static tests read every module's imports from its AST (at module level and inside
functions) and check each against LAYERS; the subprocess tests check what `import tilepy.X`
really loads. A plain AST walk, not import-linter: the layers are folders mapped onto one
package (setup.py), which import-linter's graph builder does not follow, and it cannot say
"only inside a function" (the front end loads the interpreter and the JIT lazily).
"""

import ast
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# layer -> (layers its modules may import at module level, layers they may import only
# inside a function). "tilepy" is the front end (the tilepy/ folder); a layer may always
# import itself. parallel may import models in its training helpers, once there are some.
LAYERS = {
    "precision": (set(), set()),
    "ir": ({"precision"}, set()),
    "interpreter": ({"ir", "precision"}, set()),
    "jit": ({"ir", "precision"}, set()),
    "tilepy": ({"ir", "precision"}, {"interpreter", "jit"}),
    "parallel": ({"precision"}, set()),
    "models": ({"tilepy", "ir", "precision"}, {"interpreter", "jit"}),
}
# The package root (tilepy/__init__.py) runs before any layer loads, so it imports tilepy
# modules only inside functions (lazily); the layers below the front end take only its
# __version__ from it.
HEAVY = ("numba", "llvmlite", "mpi4py", "matplotlib")  # never loaded by `import tilepy.X`
# Cycles through a function-level import, each inside one layer, each import commented.
KNOWN_CYCLES = [
    # PrimFunc.__str__ prints itself; Stmt.reads()/writes() ask the statement table
    {"tilepy.ir.printer", "tilepy.ir.stmt", "tilepy.ir.tileops"},
    {"tilepy.interpreter.access", "tilepy.interpreter.evaluate",
     "tilepy.interpreter.sanitize", "tilepy.interpreter.state"},  # Ctx.host_value
    {"tilepy.precision.codecs", "tilepy.precision.codecs64"},  # numba codecs, both lazy
    {"tilepy.models.ops", "tilepy.models.tensor"},  # Tensor's operators call the ops (lazily)
]


def layer_of(module: str) -> str:
    """The layer of a dotted tilepy module name; "root" for the package itself."""
    parts = module.split(".")
    if parts == ["tilepy"]:
        return "root"
    return parts[1] if parts[1] in LAYERS else "tilepy"


def modules() -> dict[str, tuple[str, str]]:
    """Every module of the package: dotted name -> (layer, path)."""
    found = {}
    for layer in LAYERS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, layer)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, f[:-3]), ROOT).split(os.sep)
                    parts = ["tilepy"] + (rel[1:] if layer == "tilepy" else rel)
                    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                    found[name] = (layer, os.path.join(folder, f))
    return found


MODULES = modules()


def imports(path: str) -> list[tuple[int, str, bool]]:
    """(line, imported tilepy module, inside a function) for every import in `path`;
    `from tilepy import __version__` gives "tilepy.__version__"."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, in_function) for a in child.names
                             if a.name.split(".")[0] == "tilepy")
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith("tilepy"):
                for a in child.names:  # `from tilepy.frontend import exprs` names a module
                    sub = f"{child.module}.{a.name}"
                    name = sub if sub in MODULES or sub == "tilepy.__version__" else child.module
                    found.append((child.lineno, name, in_function))
            visit(child, nested)

    visit(tree, False)
    return sorted(set(found))


def violations(layer: str, path: str) -> list[str]:
    top, lazy = LAYERS[layer]
    where = os.path.relpath(path, ROOT)
    out = []
    for line, name, in_function in imports(path):
        target = layer_of(name)
        if where == os.path.join("tilepy", "__init__.py"):
            ok, rule = in_function, "the package root may import it only inside a function"
        elif target == "root" or name == "tilepy.__version__":
            ok = layer in ("tilepy", "models") or name == "tilepy.__version__"
            rule = f"the {layer} layer may take only __version__ from the package root"
        else:
            ok = target in (layer, *top) or (in_function and target in lazy)
            rule = (f"the {layer} layer may import it only inside a function" if target in lazy
                    else f"the {layer} layer may import only "
                    f"{', '.join(sorted({layer, *top, *lazy}))}")
        if not ok:
            out.append(f"{where}:{line}: imports {name} ({target} layer): {rule}")
    return out


def test_every_import_respects_the_layer_table():
    found = [v for layer, path in MODULES.values() for v in violations(layer, path)]
    assert not found, "imports that break DESIGN.md's layers:\n" + "\n".join(found)


def test_the_table_names_every_layer_folder():
    folders = {d for d in os.listdir(ROOT) if d != "tests"
               and os.path.exists(os.path.join(ROOT, d, "__init__.py"))}
    assert folders == set(LAYERS)


def test_no_import_cycles_but_the_known_ones():
    """Counting function-level imports too; the root is left out (it loads the public
    names lazily, and what imports it gets only its constants)."""
    graph = {name: {n for _, n, _ in imports(path) if n in MODULES and n != "tilepy"}
             for name, (_, path) in MODULES.items() if name != "tilepy"}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reached = {name: reach(name) for name in graph}
    cycles = {frozenset(m for m in reached[n] if n in reached[m]) for n in graph
              if n in reached[n]}
    known = {frozenset(c) for c in KNOWN_CYCLES}
    new = [sorted(c) for c in cycles - known]
    assert not new, f"import cycles, counting function-level imports: {new}"
    assert cycles == known, "a known cycle is gone: remove it from KNOWN_CYCLES"


def _loaded_by(module: str) -> tuple[list[str], list[str]]:
    code = (f"import json, sys; import {module}; print(json.dumps([sorted(m for m in "
            f"sys.modules if m.split('.')[0] == 'tilepy'), [m for m in {HEAVY!r} "
            f"if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", ["tilepy", "tilepy.precision", "tilepy.ir",
                                    "tilepy.interpreter", "tilepy.jit", "tilepy.language",
                                    "tilepy.parallel"])
def test_import_loads_only_the_layers_below(module):
    loaded, heavy = _loaded_by(module)
    assert not heavy, f"import {module} loads {heavy}"
    if module == "tilepy":
        assert loaded == ["tilepy"], "import tilepy loads only the package root"
        return
    layer = layer_of(module)
    allowed = {"root", layer, *LAYERS[layer][0]}
    above = [m for m in loaded if layer_of(m) not in allowed]
    assert not above, f"import {module} loads modules of layers above it: {above}"


def test_the_root_keeps_jit_and_backend_callable_whichever_loads_first():
    code = ("import tilepy.jit, tilepy.backend, tilepy, sys; "
            "print(callable(tilepy.jit), tilepy.jit is sys.modules['tilepy.jit'], "
            "tilepy.backend.__name__, tilepy.Kernel.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "backend", "tilepy.kernel"]


def test_each_error_is_one_class_wherever_it_is_imported_from():
    import tilepy
    import tilepy.errors
    import tilepy.ir.errors
    import tilepy.precision.errors

    for low in (tilepy.precision.errors, tilepy.ir.errors):
        for name, cls in vars(low).items():
            if isinstance(cls, type) and issubclass(cls, Exception) or name == "Loc":
                assert getattr(tilepy.errors, name) is cls, name
    for name in tilepy.__all__:
        if name.endswith("Error"):
            assert getattr(tilepy, name) is getattr(tilepy.errors, name)
            assert issubclass(getattr(tilepy, name), tilepy.precision.errors.TilepyError)
