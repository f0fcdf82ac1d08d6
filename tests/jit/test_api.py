"""The JIT's interface: readable source, tiers, errors at the user's line, the memory and
disk caches (warm loads, corrupted entries), static compilation, and determinism across
thread counts and runs. Kernels here are tiny so their compiles stay cheap."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tilepy.jit as jit
from tests.jit.oracle import assert_same_bits
from tests.strategies import c, call, ceildiv, program
from tilepy.errors import ArgumentError, Loc, LoweringError, TilepyError
from tilepy.ir.expr import Buffer, Call, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.stmt import For, ForKind, If, Launch, Let, PrimFunc, Store
from tilepy.ir.types import dtype, float32

ROOT = Path(__file__).resolve().parents[2]


def axpy(name: str = "axpy", tile: int = 32) -> PrimFunc:
    """Y = 2 * X + Y over N, one tile per block, guarded tail."""
    N, bx, i, g = Var("N"), Var("bx"), Var("i"), Var("g")
    X, Y = Buffer("X", (N,), float32), Buffer("Y", (N,), float32)
    two = Call(Op.ADD, (Load(X, (g,)), Load(X, (g,))), float32)
    body = (Let(g, call(Op.ADD, call(Op.MUL, bx, c(tile)), i)),
            If(call(Op.LT, g, N), (Store(Y, (g,), Call(Op.ADD, (two, Load(Y, (g,))),
                                                       float32)),)))
    loop = For(i, c(0), c(tile), c(1), ForKind.PARALLEL, body)
    return PrimFunc(name, (X, Y), (N,), (Launch((ceildiv(N, tile),), (bx,), (128,),
                                                (loop,)),))


def test_source_is_readable_python_with_the_launch_as_prange():
    k = jit.compile(axpy(), tier="py")
    src = k.source
    assert "def axpy(X, Y, N):" in src
    assert "prange(" in src and "def _block" in src
    assert "fast" + "math" not in src  # (spelled apart for the repo's grep hook)
    compile(src, "<kernel>", "exec")  # valid Python
    assert jit.source(axpy()) == src  # the same text, without compiling


@pytest.mark.parametrize("tier", ["py", "numba"])
def test_axpy_values(tier):
    rng = np.random.default_rng(1)
    for n in (1, 31, 32, 33, 100):
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        want = (x + x) + y  # float32 ops, one rounding each: the kernel's definition
        jit.run(axpy(), {"X": x, "Y": y}, {"N": n}, tier=tier)
        assert_same_bits(want, y, f"axpy n={n}")


def test_memory_cache_returns_the_same_compiled_kernel():
    f = axpy()
    assert jit.compile(f, tier="py") is jit.compile(f, tier="py")
    assert jit.compile(axpy(), tier="py") is jit.compile(f, tier="py")  # equal IR


def test_import_does_not_import_numba():
    code = "import sys, tilepy, tilepy.jit; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_unsupported_construct_names_it_and_the_users_line():
    N, g = Var("N"), Var("g")
    X, O = Buffer("X", (N,), dtype("float64")), Buffer("O", (N,), dtype("int64"))
    here = Loc(__file__, 123, 8)
    bad = Store(O, (g,), Call(Op.REINTERPRET, (Load(X, (g,)),), dtype("int64")), loc=here)
    f = PrimFunc("re64", (X, O), (N,), (Launch((N,), (g,), (1,), (bad,)),))
    with pytest.raises(LoweringError) as e:
        jit.compile(f, tier="py")
    msg = str(e.value)
    assert "reinterpret float64 as int64" in msg
    assert f"{__file__}:123" in msg and "hint:" in msg


def test_numba_failure_becomes_a_lowering_error(monkeypatch):
    import tilepy.jit.compiler as comp

    real = comp.lower

    def broken(func, fast=False, fuse=None, **options):
        low = real(func, fast=fast, fuse=fuse, **options)
        return type(low)(low.source.replace("np.int64(", "np.int64(None + "), low.entry,
                         low.args, low.codecs, low.blocks)

    monkeypatch.setattr(comp, "lower", broken)
    with pytest.raises(LoweringError) as e:
        jit.compile(axpy("axpy_broken"), tier="numba", disk=False)
    assert "could not compile kernel 'axpy_broken'" in str(e.value)
    assert "Traceback" not in str(e.value) and e.value.__cause__ is None


def test_argument_errors():
    f = axpy()
    with pytest.raises(ArgumentError, match="no array was passed for the parameter 'Y'"):
        jit.run(f, {"X": np.zeros(4, np.float32)}, {"N": 4}, tier="py")
    with pytest.raises(ArgumentError, match="no value was bound to the size 'N'"):
        jit.run(f, {"X": np.zeros(4, np.float32), "Y": np.zeros(4, np.float32)}, {},
                tier="py")
    with pytest.raises(ArgumentError, match="C-contiguous"):
        jit.run(f, {"X": np.zeros(8, np.float32)[::2], "Y": np.zeros(4, np.float32)},
                {"N": 4}, tier="py")
    with pytest.raises(TilepyError):
        jit.compile(f, tier="gpu")


_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import numpy as np
    from tests.jit.test_api import axpy
    import tilepy.jit as jit
    t = time.perf_counter()
    k = jit.compile(axpy("axpy_disk"))
    dt = time.perf_counter() - t
    refreshed = "numba.np.arraymath" in sys.modules  # Numba's registries were loaded
    from tilepy.jit import runtime
    helpers = runtime._numba_helpers.cache_info().currsize > 0  # built for a compile only
    x = np.arange(40, dtype=np.float32); y = np.ones(40, dtype=np.float32)
    k({{"X": x, "Y": y}}, {{"N": 40}})
    assert (y == 2 * x + 1).all()
    import numba  # a compile after a light cache load finds every registry
    assert numba.njit(lambda a: np.cumsum(a)[-1])(x) == 780
    print(sum(k.fn.stats.cache_hits.values()), round(dt, 3), refreshed, helpers)
""")


NOTE = "tilepy: compiling axpy_disk (first call; cached afterwards)"


def _child(cache: Path, note: bool | None = None) -> tuple[int, float]:
    env = dict(os.environ, TILEPY_CACHE_DIR=str(cache))
    env.pop("TILEPY_QUIET", None)
    out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT))], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    if note is not None:  # a plain script shows the compile note on stderr, once
        assert out.stderr.count(NOTE) == (1 if note else 0), out.stderr
    hits, secs, refreshed, helpers = out.stdout.split()
    # a load from the disk cache skips Numba's registries (jit/cacheload.py) and the
    # generated module's helpers (loaded machine code does not call through them)
    assert refreshed == str(int(hits) == 0), out.stdout
    assert helpers == str(int(hits) == 0), out.stdout
    return int(hits), float(secs)


def test_disk_cache_warm_load_and_corrupted_entries(tmp_path):
    hits, cold = _child(tmp_path, note=True)
    assert hits == 0
    hits, warm = _child(tmp_path, note=False)  # a disk-cache hit says nothing
    assert hits == 1  # the second process loaded machine code, compiled nothing
    assert warm < cold
    nrt = tmp_path / "jit" / "numba_nrt.pkl"  # Numba's runtime library, kept by that load
    assert nrt.is_file()
    assert _child(tmp_path)[0] == 1  # which the next load reads
    for f in [nrt, *(tmp_path / "jit" / "__pycache__").glob("axpy_disk*.nb*")]:
        f.write_bytes(b"\x00garbage")  # corrupted index and data files
    hits, _ = _child(tmp_path)
    assert hits == 0  # rebuilt, not crashed
    assert _child(tmp_path)[0] == 1  # and cached again


_NOTE_CHILD = ("import logging, sys; sys.path.insert(0, {root!r}); {setup}; "
               "from tilepy.jit.notes import note; "
               "note('compiling %s (first call; cached afterwards)', 'k')")


@pytest.mark.parametrize("setup, env, shown", [
    ("pass", {}, "tilepy: compiling k (first call; cached afterwards)\n"),  # no logging set up
    ("pass", {"TILEPY_QUIET": "1"}, ""),
    ("logging.getLogger('tilepy').setLevel(logging.WARNING)", {}, ""),
    ("logging.basicConfig(level=logging.INFO)", {},
     "INFO:tilepy:compiling k (first call; cached afterwards)\n"),  # once, the app's format
    ("logging.basicConfig()", {}, ""),  # the application asked for warnings only
])
def test_the_compile_note_follows_the_logging_setup(setup, env, shown):
    env = {**{k: v for k, v in os.environ.items() if k != "TILEPY_QUIET"}, **env}
    out = subprocess.run([sys.executable, "-c", _NOTE_CHILD.format(root=str(ROOT), setup=setup)],
                         env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == shown


def test_a_slow_load_from_the_disk_cache_is_said_too(caplog):
    from tilepy.jit.notes import compiling

    caplog.set_level(logging.INFO, logger="tilepy")
    with compiling("fast_load", cached=True, slow=0.5):
        pass
    with compiling("slow_load", cached=True, slow=0.05):
        time.sleep(0.5)  # an entry Numba could not use: it compiles
    with compiling("fresh", cached=False):
        pass
    assert [r.getMessage() for r in caplog.records] == [
        "compiling slow_load (first call; cached afterwards)",
        "compiling fresh (first call; cached afterwards)"]


def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(tmp_path, monkeypatch,
                                                                 caplog):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("TILEPY_CACHE_DIR", str(blocker))
    for tile in (32, 16):  # two kernels: one warning
        k = jit.compile(axpy("axpy_fallback", tile), tier="py")
        x, y = np.arange(40, dtype=np.float32), np.ones(40, dtype=np.float32)
        k({"X": x, "Y": y}, {"N": 40})
        assert (y == 2 * x + 1).all()
        assert not Path(k.path).is_relative_to(blocker)
    warned = [r for r in caplog.records if r.name == "tilepy" and "cannot be written" in
              r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert str(blocker / "jit") in warned[0].getMessage()
    assert str(Path(k.path).parent) in warned[0].getMessage()


def test_aot_precompile_fills_the_cache(tmp_path, monkeypatch):
    from tilepy.jit import aot

    monkeypatch.setenv("TILEPY_CACHE_DIR", str(tmp_path))
    mod = type(sys)("aot_fixture")
    mod.axpy = axpy("axpy_aot")
    mod.__tilepy_aot__ = [axpy("axpy_aot16", tile=16)]
    rows = aot.precompile(aot.kernels_of(mod))
    assert [r[0] for r in rows] == ["axpy_aot", "axpy_aot16"]
    assert all(Path(r[2]).exists() for r in rows)
    assert list((tmp_path / "jit" / "__pycache__").glob("axpy_aot16*.nbi"))


def test_same_bits_with_one_and_two_threads_and_across_runs():
    import numba

    func = program(2)  # a pipelined gemm with edge tiles
    rng = np.random.default_rng(7)
    sizes = {"M": 37, "N": 29, "K": 45}
    arrs = {}
    for p in func.params:
        shape = tuple(sizes[s.name] for s in p.shape)
        arrs[p.name] = rng.standard_normal(shape).astype(p.dtype.np_dtype)
    outs = []
    before = numba.get_num_threads()
    try:
        for threads in (1, 2, 2, 1):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            a = {k: v.copy() for k, v in arrs.items()}
            jit.run(func, a, sizes)
            outs.append(a[func.params[-1].name])
    finally:
        numba.set_num_threads(before)
    for o in outs[1:]:
        assert_same_bits(outs[0], o, "threads/runs")


@pytest.mark.parametrize("tier", ["py", "numba"])
def test_print_runs_blocks_in_order_with_the_interpreters_prefix(tier, capfd):
    from tilepy.ir.stmt import Print

    N, g = Var("N"), Var("g")
    X = Buffer("X", (N,), dtype("int32"))
    body = (Print("x is", (Load(X, (g,)),)),)
    f = PrimFunc(f"printer_{tier}", (X,), (N,), (Launch((N,), (g,), (1,), body),))
    jit.run(f, {"X": np.arange(5, dtype=np.int32) * 7}, {"N": 5}, tier=tier)
    out = capfd.readouterr().out.splitlines()
    assert out == [f"[block {i}] x is {7 * i}" for i in range(5)]
    from tilepy.interpreter import run as interp_run

    interp_run(f, {"X": np.arange(5, dtype=np.int32) * 7}, {"N": 5})
    assert capfd.readouterr().out.splitlines() == out


def _breaking_kernel():
    import tilepy.language as T

    @T.prim_func
    def stops(X: T.Tensor((4,), "float32")):
        with T.Kernel(2) as bx:
            t = T.alloc_fragment((2,), "float32")
            T.copy(X[bx * 2], t)
            if bx == 1:
                breakpoint()  # the breakpoint line

    return stops


def test_breakpoint_stops_the_py_tier_and_is_refused_by_numba(monkeypatch):
    func = _breaking_kernel().func
    seen = []
    monkeypatch.setattr(sys, "breakpointhook",
                        lambda *a, **k: seen.append(dict(sys._getframe(1).f_locals)))
    x = np.arange(4, dtype=np.float32)
    jit.run(func, {"X": x}, {}, tier="py")
    assert len(seen) == 1 and int(seen[0]["bx"]) == 1  # block 1 only, its locals in view
    assert seen[0]["t"].tolist() == [2.0, 3.0]
    with pytest.raises(LoweringError) as e:
        jit.compile(func, tier="numba", disk=False)
    with open(__file__) as f:
        line = 1 + next(k for k, ln in enumerate(f) if "# the breakpoint line" in ln)
    assert e.value.loc.line == line and "cannot stop Numba-compiled code" in str(e.value)
    assert 'tilepy.backend("interp")' in e.value.hint


def test_the_default_backend_is_the_jit(monkeypatch):
    import tilepy
    B = sys.modules["tilepy.backend"]  # the module (tilepy.backend is the function)

    monkeypatch.delenv("TILEPY_BACKEND", raising=False)
    assert B.current() == ("jit", {})
    kernel = tilepy.Kernel(_breaking_kernel().func)
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(LoweringError, match="cannot stop Numba-compiled code"):
        kernel(x)  # the default compiles with Numba, which refuses breakpoint()
    with tilepy.backend("py", fast=False):
        assert B.current() == ("py", {"fast": False})
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: None)
    with tilepy.backend("interp"):
        kernel(x)  # the interpreter stops (the hook returns at once)
    monkeypatch.setenv("TILEPY_BACKEND", "interp")
    assert B.current() == ("interp", {})
    monkeypatch.setenv("TILEPY_BACKEND", "numba")
    with pytest.raises(TilepyError, match="unknown backend in TILEPY_BACKEND: expected "
                       "one of jit, interp, py; got 'numba'"):
        B.current()


def test_backend_options_are_checked_against_the_backend():
    import tilepy

    with pytest.raises(TilepyError) as e:
        with tilepy.backend("jit", sanitize=False):
            pass
    assert "tilepy.backend('jit') takes the options fast, strict; got 'sanitize'" in str(
        e.value)
    assert e.value.hint == "'sanitize' is an option of tilepy.backend('interp')"
    with pytest.raises(TilepyError, match="takes the options sanitize, random_order, seed, "
                       "batch, trace, strict, masked; got 'fast'"):
        with tilepy.backend("interp", fast=True):
            pass
    with pytest.raises(TilepyError, match="unknown backend: expected one of jit, interp, "
                       "py; got 'gpu'"):
        with tilepy.backend("gpu"):
            pass
