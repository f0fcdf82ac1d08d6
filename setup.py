"""Maps the layer folders at the repository root onto one import package, `tilepy`.

`ir/` installs as `tilepy.ir`, `jit/` as `tilepy.jit`, and so on (see DESIGN.md, Layers).
Subpackages are found by walking each layer, so adding a folder with an `__init__.py`
needs no edit here.
"""

import os

from setuptools import setup

LAYERS = {
    "tilepy": "tilepy",
    "tilepy.ir": "ir",
    "tilepy.interpreter": "interpreter",
    "tilepy.jit": "jit",
    "tilepy.precision": "precision",
    "tilepy.parallel": "parallel",
    "tilepy.models": "models",
}


def _packages():
    package_dir, packages = {}, []
    for name, folder in LAYERS.items():
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            if "__init__.py" not in files:
                continue
            rel = os.path.relpath(root, folder)
            pkg = name if rel == "." else name + "." + rel.replace(os.sep, ".")
            packages.append(pkg)
            package_dir[pkg] = root
    return packages, package_dir


_pkgs, _dirs = _packages()
setup(packages=_pkgs, package_dir=_dirs)
