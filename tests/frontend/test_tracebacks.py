"""A TilepyError's printed traceback shows the user's frames and the message, not tilepy's
own frames; TILEPY_TRACEBACK=full brings those back. Checked as a user sees it: a script
run in a subprocess."""

import os
import re
import subprocess
import sys
import textwrap
import traceback

import pytest

from tilepy.boundary import api_boundary
from tilepy.errors import TileTypeError
from tilepy.ir.expr import Var
from tilepy.ir.types import int32
from tilepy.kernel import eval_index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS = tuple(os.path.join(ROOT, d) + os.sep for d in
               ("tilepy", "ir", "interpreter", "jit", "precision", "parallel", "models"))

SCRIPT = textwrap.dedent('''\
    import traceback
    import numpy as np
    import tilepy
    import tilepy.language as T


    def build(n=16):
        @T.prim_func
        def strided(X: T.Tensor((n,), "float32"), Y: T.Tensor((n // 2,), "float32")):
            with T.Kernel(1) as _:
                T.copy(X[0:n:2], Y)


    @T.prim_func
    def oob(X: T.Tensor((8,), "float32")):
        with T.Kernel(1) as _:
            t = T.alloc_fragment((4,), "float32")
            for i in T.serial(8):
                t[i] = X[i]


    try:
        build()
    except tilepy.TilepyError:
        traceback.print_exc()
    with tilepy.backend("interp"):
        oob(np.zeros(8, np.float32))
    ''')


def _run(tmp_path, full: bool) -> str:
    script = tmp_path / "user_kernel.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TILEPY_TRACEBACK"}
    if full:
        env["TILEPY_TRACEBACK"] = "full"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    return out.stderr


def _files(text: str) -> list[str]:
    return re.findall(r'File "([^"]+)", line \d+', text)


def test_traceback_shows_the_users_frames_and_message_only(tmp_path):
    err = _run(tmp_path, full=False)
    files = _files(err)
    assert files and not [f for f in files if f.startswith(LAYERS)], err
    user = str(tmp_path / "user_kernel.py")
    for line in (23, 8, 27):  # build(), @T.prim_func, oob(...)
        assert f'File "{user}", line {line}' in err, err
    assert f"TileSyntaxError: {user}:11: slices with a step are not supported" in err
    assert f"OutOfBoundsError: {user}:19: block 0: out-of-bounds write of t[4]" in err
    assert "TILEPY_TRACEBACK=full" in err
    assert len(err.splitlines()) < 30, err


def test_tilepy_traceback_full_shows_internal_frames(tmp_path):
    err = _run(tmp_path, full=True)
    internal = [f for f in _files(err) if f.startswith(LAYERS)]
    assert any("frontend" in f for f in internal) and any("interpreter" in f for f in internal)
    assert "slices with a step are not supported" in err


def test_chained_causes_are_kept_without_internal_frames():
    @api_boundary
    def bind_size():
        try:
            eval_index(Var("q", int32), {})  # tilepy code raising KeyError
        except KeyError as e:
            raise TileTypeError("the size q is not bound") from e

    with pytest.raises(TileTypeError) as info:
        bind_size()
    cause = info.value.__cause__
    assert isinstance(cause, KeyError)
    files = [f.filename for f in traceback.extract_tb(cause.__traceback__)]
    assert files == [__file__]
    assert all(not f.filename.startswith(LAYERS)
               for f in traceback.extract_tb(info.value.__traceback__))
