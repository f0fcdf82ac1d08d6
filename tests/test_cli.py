"""The `tilepy` command as a user runs it, from the folder holding their kernels: `ir` on
eager and lazy kernels (without running the file's __main__ block), one-line errors with
exit status 2, and `jit-compile` reporting what it compiled and what it could not."""

import os
import subprocess
import sys
import textwrap

import pytest

KERNELS = textwrap.dedent('''\
    import tilepy
    import tilepy.language as T


    @tilepy.jit
    def scale(X, factor: float = 2.0, block: int = 64):
        n = T.const("n")
        X: T.Tensor((n,), "float32")
        Y = T.empty((n,), "float32")
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * factor
        return Y


    @tilepy.jit(out_idx=[-1])
    def add(n, block=32):
        @T.prim_func
        def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block)) as bx:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] + 1.0
        return main


    if __name__ == "__main__":
        open("MAIN_RAN", "w").close()
    ''')

# The installed `tilepy` script: the current folder is not on sys.path by itself.
COMMAND = [sys.executable, "-c", "import sys; del sys.path[0]; from tilepy.cli import main; "
           "sys.exit(main())"]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "kern.py").write_text(KERNELS)
    return tmp_path


def _tilepy(folder, *args):
    env = dict(os.environ, TILEPY_CACHE_DIR=str(folder / "cache"))
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120,
                          cwd=folder, env=env)


def test_ir_shows_eager_and_lazy_kernels_without_running_main(folder):
    out = _tilepy(folder, "ir", "kern.py:scale", "block=32")
    assert out.returncode == 0, out.stderr
    assert "def scale(X: T.Tensor((n,), \"float32\"), Y: T.Tensor((n,), \"float32\"))" \
        in out.stdout
    assert "Y[bx * 32 + i] = X[bx * 32 + i] * 2.0  # kern.py:12:12" in out.stdout
    out = _tilepy(folder, "ir", "kern:add", "64")  # a module of the current folder
    assert out.returncode == 0, out.stderr
    assert "def main(A: T.Tensor((64,), \"float32\")" in out.stdout
    assert not (folder / "MAIN_RAN").exists()


@pytest.mark.parametrize("args, message", [
    (["nofile.py:k"], "no such file: nofile.py"),
    (["kern.py:nope"], "kern.py has no 'nope'; its kernels: scale, add"),
    (["kern.py:add", "float16"], "argument 'float16' is not a Python literal"),
    (["kern.py:add"], "kern.py:add: missing a required argument: 'n'"),
])
def test_ir_mistakes_are_one_line_with_status_2(folder, args, message):
    out = _tilepy(folder, "ir", *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("tilepy: ") and message in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and not out.stdout


def test_jit_compile_reports_what_it_compiled_and_what_it_could_not(folder):
    (folder / "empty.py").write_text("x = 1\n")
    out = _tilepy(folder, "jit-compile", "empty", "kern")
    assert out.returncode == 1
    compiled = [line for line in out.stdout.splitlines() if line.startswith("kern: compiled ")]
    assert len(compiled) == 1 and compiled[0].startswith("kern: compiled scale in "), out.stdout
    path = compiled[0].split(" -> ")[1]
    assert os.path.isfile(path) and path.startswith(str(folder / "cache"))
    assert "tilepy: empty: found no kernels" in out.stderr
    assert "tilepy: kern: add needs build-time arguments (n)" in out.stderr
    assert "__tilepy_aot__ = [add(...)]" in out.stderr and "Traceback" not in out.stderr
    assert not (folder / "MAIN_RAN").exists()
