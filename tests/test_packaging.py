"""Packaging promises: one `tilepy` package over the layer folders, a fast `import tilepy`,
the lint rule against bare layer imports, and the CLI."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_tilepy_does_not_import_numba_or_mpi():
    out = _python("import sys, tilepy, tilepy.language, tilepy.kernels, tilepy.interpreter; "
                  "print('numba' in sys.modules, 'mpi4py' in sys.modules)")
    assert out.split() == ["False", "False"]


def test_layer_folders_are_subpackages():
    out = _python("import tilepy.ir, tilepy.interpreter, tilepy.jit, tilepy.precision, "
                  "tilepy.parallel, tilepy.models, os; "
                  "print(*[os.path.basename(os.path.dirname(m.__file__)) for m in "
                  "(tilepy.ir, tilepy.interpreter, tilepy.precision, tilepy.parallel)])")
    assert out.split() == ["ir", "interpreter", "precision", "parallel"]


def test_lint_rule_bans_bare_layer_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import ir\nfrom precision import formats\n")
    cfg = os.path.join(ROOT, "pyproject.toml")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", cfg,
                          "--select", "TID251", str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert "tilepy.ir" in out.stdout and "tilepy.precision" in out.stdout


def test_cli_prints_ir():
    target = os.path.join(ROOT, "tilepy", "kernels", "gemm.py") + ":gemm"
    out = subprocess.run([sys.executable, "-m", "tilepy.cli", "ir", target, "32", "32", "16"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'T.alloc_shared((32, 16), "float16")' in out.stdout
    assert "T.gemm(A_shared, B_shared, C_local)" in out.stdout
