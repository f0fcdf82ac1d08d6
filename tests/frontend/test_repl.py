"""Kernels defined at a prompt: the README's quickstart typed into the standard Python REPL
(3.11 here: its source comes from readline's history), a prompt with no history (a clear
error saying what to do), and IPython/Jupyter cells (their source is in linecache)."""

import linecache
import os
import re
import select
import subprocess
import sys

import pytest

from tilepy.errors import TileSyntaxError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _quickstart() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("## Quickstart (REPL)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _env(tmp_path) -> dict:
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb", TILEPY_BACKEND="interp")
    env.pop("PYTHONSTARTUP", None)
    return env


def _run_in_tty(argv, text: str, env: dict) -> str:
    """Run argv on a pseudo-terminal (so the REPL reads through readline), type `text`."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    os.write(master, text.encode())
    out = b""
    while select.select([master], [], [], 60)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    proc.kill()
    proc.wait(10)
    os.close(master)
    return out.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
def test_readme_quickstart_runs_in_the_standard_repl(tmp_path):
    text = _quickstart() + "\nprint('QUICKSTART', c.shape, c.dtype)\nexit()\n"
    out = _run_in_tty([sys.executable, "-i", "-q"], text, _env(tmp_path))
    assert "QUICKSTART (100, 90) float32" in out, out
    assert re.search(r"T\.gemm\(A_s, B_s, C_l\)  # <stdin#\d+>:14:16", out), out
    assert "Error" not in out, out


def test_prompt_without_source_says_what_to_do(tmp_path):
    text = _quickstart().split("kernel = matmul()")[0] + "kernel = matmul()\n"
    out = subprocess.run([sys.executable, "-i", "-q"], input=text, capture_output=True,
                         text=True, timeout=60, env=_env(tmp_path))
    err = out.stderr
    assert "TileSyntaxError: cannot read the source of 'matmul': it was typed at the " \
           "Python prompt" in err, err
    assert "put the kernel in a .py file and import it" in err and "IPython" in err
    assert "Python >= 3.13" in err
    assert 'File "<stdin>", line 1, in <module>' in err and "tilepy/" not in err


def test_kernels_in_linecache_registered_cells_work():
    """What IPython and Jupyter do: each cell's source is put in linecache under the
    cell's file name before the cell runs."""
    import tilepy  # noqa: F401 - the cell's globals import it themselves

    def run_cell(name: str, source: str) -> dict:
        lines = source.splitlines(keepends=True)
        linecache.cache[name] = (len(source), None, lines, name)
        scope: dict = {"__name__": "__main__"}
        exec(compile(source, name, "exec"), scope)  # noqa: S102 - a simulated cell
        return scope

    cell = "<ipython-input-3-0123abcd>"
    scope = run_cell(cell, _quickstart().split("kernel = matmul()")[0])
    ir = str(scope["matmul"]().ir)
    assert f"T.gemm(A_s, B_s, C_l)  # {cell}:16:16" in ir
    bad = ("import tilepy.language as T\n\n@T.prim_func\ndef k(A: T.Tensor((8,), 'float32')):\n"
           "    with T.Kernel(1) as _:\n        A[0] = missing\n")
    with pytest.raises(TileSyntaxError) as info:
        run_cell("/tmp/ipykernel_77/1234.py", bad)
    assert str(info.value) == ("/tmp/ipykernel_77/1234.py:6: name 'missing' is not defined\n"
                               "    A[0] = missing\n           ^")
