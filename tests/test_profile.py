"""tilepy.profile: launches recorded with the IR's counts, the table against a roofline, the
Chrome trace, the cached roofline measurement, the PNG, `tilepy profile` and TileLang's
do_bench in milliseconds."""

import importlib
import json
import textwrap
import time

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.cli import main
from tilepy.ir.analysis import count
from tilepy.profiling import roofline
from tilepy.profiling.roofline import Roofline

ROOF = Roofline(100.0, 10.0, "given", "given", "test cpu")
BACKEND = importlib.import_module("tilepy.backend")


@tilepy.jit(out_idx=[-1])
def axpb(block=8):
    N = T.symbolic("N")

    @T.prim_func
    def axpb(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block)) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * 3.0 + 1.0

    return axpb


def _run_three(k):
    with tilepy.profile(roofline=ROOF) as p:
        k(np.ones(40, np.float32))
        k(np.ones(40, np.float32))
        k(np.ones(24, np.float32))
    return p


def test_each_launch_is_recorded_with_the_irs_counts_against_the_roofline():
    k = axpb(8)
    p = _run_three(k)
    assert [(r.name, r.backend, r.sizes) for r in p.launches] == [
        ("axpb", "interp", {"N": 40})] * 2 + [("axpb", "interp", {"N": 24})]
    rows = p.rows()
    assert [(r.sizes, r.calls) for r in rows] == [({"N": 40}, 2), ({"N": 24}, 1)]
    c = count(k.func, {"N": 40})
    r = rows[0]
    assert (r.flops, r.bytes) == (c.flops, c.global_bytes) == (80, 320)
    assert r.best_s == min(x.seconds for x in p.launches[:2]) > 0
    assert r.gflops == pytest.approx(80 / r.best_s / 1e9)
    assert r.bound == "memory" and r.roof_gflops == pytest.approx(0.25 * 10.0)
    table = p.table()
    assert "| axpb | interp | N=40 | 2 |" in table and "100.0 GFLOP/s (given)" in table


def test_the_hook_is_off_outside_a_session_and_sessions_nest():
    k = axpb(8)
    assert BACKEND.PROFILER is None
    with tilepy.profile(roofline=ROOF) as outer:
        k(np.ones(8, np.float32))
        with tilepy.profile(roofline=ROOF) as inner:
            k(np.ones(8, np.float32))
        assert BACKEND.PROFILER is outer
    assert BACKEND.PROFILER is None
    k(np.ones(8, np.float32))
    assert (len(outer.launches), len(inner.launches)) == (1, 1)
    with tilepy.profile(roofline=ROOF) as empty:
        pass
    assert empty.table() == "(no kernel launches were recorded)"


def test_two_kernels_of_one_name_get_two_rows_and_an_uncountable_one_is_marked(monkeypatch):
    with tilepy.profile(roofline=ROOF) as p:
        axpb(8)(np.ones(16, np.float32))
        axpb(4)(np.ones(16, np.float32))
    assert [(r.name, r.flops) for r in p.rows()] == [("axpb", 32), ("axpb", 32)]

    def broken(func, sizes):
        raise KeyError("Foo")

    monkeypatch.setattr("tilepy.ir.analysis.count", broken)
    p._counts.clear()
    rows = p.rows()
    assert [(r.flops, r.exact_counts) for r in rows] == [(0, False), (0, False)]
    assert "0.00*" in p.table() and "not counted" in p.table()


def test_the_chrome_trace_is_valid_json_with_one_complete_event_per_launch(tmp_path):
    p = _run_three(axpb(8))
    path = tmp_path / "trace.json"
    p.trace(path)
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == ["axpb"] * 3
    assert [e["args"]["sizes"]["N"] for e in events] == [40, 40, 24]
    assert all(e["dur"] > 0 and e["cat"] == "interp" for e in events)
    assert events[0]["ts"] < events[1]["ts"] < events[2]["ts"]
    assert events[0]["args"]["flops"] == 80 and events[2]["args"]["bytes"] == 192
    assert any(e["ph"] == "M" for e in doc["traceEvents"])


def test_the_roofline_is_measured_once_then_read_from_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPY_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(roofline, "measure", lambda: calls.append(1) or ROOF)
    assert roofline.machine_roofline() == ROOF and roofline.machine_roofline() == ROOF
    assert len(calls) == 1
    saved = json.loads((tmp_path / "roofline.json").read_text())
    assert list(saved.values())[0]["gflops"] == 100.0
    (tmp_path / "roofline.json").write_text("{ not json")  # unreadable: measured again
    assert roofline.machine_roofline() == ROOF and len(calls) == 2
    low = Roofline(20.0, 30.0, "busy", "busy")
    monkeypatch.setattr(roofline, "measure", lambda: low)  # a refresh keeps each peak's best
    assert (roofline.machine_roofline(refresh=True).gflops,
            roofline.machine_roofline().gbs) == (100.0, 30.0)


def test_a_small_measurement_gives_positive_peaks():
    r = roofline.measure(n=64, copy_mb=2, rounds=1)
    assert r.gflops > 0 and r.gbs > 0 and r.cpu == roofline.cpu_id()


def test_the_roofline_png(tmp_path):
    pytest.importorskip("matplotlib")
    p = _run_three(axpb(8))
    out = p.roofline(tmp_path / "roof.png")
    assert open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


SCRIPT = textwrap.dedent('''
    import numpy as np
    import tilepy
    import tilepy.language as T

    @T.prim_func
    def twice(X: T.Tensor((16,), "float32"), Y: T.Tensor((16,), "float32")):
        with T.Kernel(2) as bx:
            for i in T.Parallel(8):
                Y[bx * 8 + i] = X[bx * 8 + i] * 2.0

    twice(np.ones(16, np.float32), np.zeros(16, np.float32))
    print("script ran")
''')


def test_tilepy_profile_runs_a_script_prints_the_table_and_writes_a_trace(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(BACKEND, "PROFILER", None)
    monkeypatch.setattr("tilepy.profiling.roofline.machine_roofline", lambda: ROOF)
    monkeypatch.setenv("TILEPY_BACKEND", "jit")
    monkeypatch.setattr("sys.argv", ["x"])
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "t.json"
    assert main(["profile", "--backend", "interp", "--trace", str(trace), str(script)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "script ran"
    assert "| twice | interp | - | 1 |" in err and "trace written" in err
    assert [e["name"] for e in json.loads(trace.read_text())["traceEvents"]
            if e["ph"] == "X"] == ["twice"]
    assert main(["profile", str(tmp_path / "missing.py")]) == 2


def test_tilelang_do_bench_returns_milliseconds_of_the_launches(monkeypatch):
    from tilepy import compat

    clock = iter(range(0, 10**12, 10**6))  # every reading 1 ms later: each launch takes 1 ms
    monkeypatch.setattr("tilepy.profiling.session.time.perf_counter_ns", lambda: next(clock))
    assert compat.install()
    try:
        import tilelang

        k = tilelang.compile(axpb(8), out_idx=[-1])
        x = np.ones(64, np.float32)
        assert k.get_profiler().do_bench(input_tensors=[x], _n_warmup=1, _n_repeat=4) == 1.0
        slept = tilelang.profiler.do_bench(lambda: time.sleep(0.002), _n_warmup=1,
                                           _n_repeat=2)
        assert 2.0 <= slept < 200.0  # no kernel launched: the call's wall clock, in ms
    finally:
        compat.uninstall()
