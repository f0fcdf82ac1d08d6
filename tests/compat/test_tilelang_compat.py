"""TileLang compatibility mode: `import tilelang` / `tvm` resolve to tilepy's stand-ins only
when asked (never over a real TileLang unless forced); programs written in TileLang's idiom
run through them with numpy or torch data, bit-identical on the interpreter and the JIT."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilepy
from tilepy import compat


@pytest.fixture
def tl():
    assert compat.install()
    import tilelang

    yield tilelang
    compat.uninstall()


def test_install_aliases_tilelang_and_tvm_and_uninstall_removes_them(tl):
    import tilelang.language as T
    import tvm
    from tilelang.tileop.base import GemmWarpPolicy

    import tilepy.language

    assert T.Kernel is tilepy.language.Kernel and T.float32 == "float32"
    assert tl.cdiv(7, 2) == 4 and tl.math.next_power_of_2(33) == 64
    assert tl.PassConfigKey.TL_DISABLE_TMA_LOWER == "TL_DISABLE_TMA_LOWER"
    assert GemmWarpPolicy.FullRow == T.GemmWarpPolicy.FullRow
    assert T.fp8 is not None and tl.language.fp8.determine_fp8_type("e5m2") == "float8_e5m2"
    assert tvm.tir.Select is T.if_then_else
    assert tvm.DataType("float16").bits == 16 and tl.tvm is tvm
    assert str(tvm.te.var("m")) == str(T.dynamic("m"))
    assert isinstance(tl.layout.make_mma_swizzle_layout(None), T.Layout)
    compat.uninstall()
    assert "tilelang" not in sys.modules
    with pytest.raises(ImportError):
        import tilelang  # noqa: F401


def test_a_real_tilelang_is_not_shadowed_unless_forced(tmp_path, monkeypatch):
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert compat.real_tilelang_installed()
    assert compat.install() is False
    import tilelang

    assert tilelang.REAL
    assert compat.install(force=True) is True
    try:
        import tilelang as stand_in

        assert not hasattr(stand_in, "REAL") and stand_in.cdiv(3, 2) == 2
    finally:
        compat.uninstall()


PROGRAM = '''
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1], target="cuda", pass_configs={
    tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True})
def scaled_rows(M, N, block_M, block_N, dtype=T.float32, accum_dtype=T.float):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            T.use_swizzle(panel_size=8)
            row = T.alloc_fragment((block_M,), accum_dtype)
            t = T.alloc_shared((block_M, block_N), dtype)
            T.copy(X[bx * block_M, 0], t)
            T.reduce_absmax(t, row, dim=1)
            for i, j in T.Parallel(block_M, block_N):
                Y[bx * block_M + i, j] = t[i, j] / T.max(row[i], 1e-6)
    return main
'''


def _program(tmp_path, name="prog_rows"):
    path = tmp_path / f"{name}.py"
    path.write_text(PROGRAM)
    sys.path.insert(0, str(tmp_path))
    try:
        __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
    return sys.modules.pop(name)


def test_a_tilelang_idiom_program_runs_with_numpy_bit_identically(tl, tmp_path):
    mod = _program(tmp_path)
    k = mod.scaled_rows(40, 16, 16, 16)
    assert isinstance(k, tl.JITKernel) and "def main" in k.get_kernel_source()
    assert "# hint: T.use_swizzle(panel_size=8)" in str(k.get_tir())
    x = np.random.default_rng(1).standard_normal((40, 16)).astype(np.float32)
    with tilepy.backend("interp"):
        a = k(x)
    with tilepy.backend("py"):
        b = k(x)
    want = x / np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-6))
    assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist()
    assert np.array_equal(a, want)


def test_profiler_autotuner_and_testing_helpers(tl):
    import tilelang.language as T
    import tilelang.testing
    from tilelang.autotuner import AutoTuner

    def add_one(N, block=None):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block)) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] + 1.0
        return main

    tilelang.testing.set_random_seed(0)
    with tilepy.backend("interp"):
        k = tl.compile(add_one(24, 8), out_idx=[-1])
        prof = k.get_profiler(tl.TensorSupplyType.Integer)
        prof.assert_allclose(lambda x: x + 1, atol=0, rtol=0)
        with pytest.raises(AssertionError, match="elements differ"):
            prof.assert_allclose(lambda x: x + 2, atol=0, rtol=0)
        assert prof.do_bench() > 0
        calls = []  # the interpreter's launches are timed once, however many repeats asked
        kernel_fn = prof.func
        assert tl.profiler.do_bench(lambda: calls.append(kernel_fn(np.zeros(24, np.float32))),
                                    _n_warmup=10, _n_repeat=10) > 0
        assert len(calls) == 1
        assert tl.profiler.do_bench(lambda: calls.append(0), _n_warmup=2, _n_repeat=3) >= 0
        assert len(calls) == 7  # no kernel launched: warm-up and repeats as asked
        x = np.arange(24, dtype=np.float32)  # `profiler.func`: the kernel, as TileLang's adapter
        assert np.array_equal(prof.func(x), x + 1) and np.array_equal(prof(x), x + 1)
        (x,) = prof._get_inputs()  # TileLang's input supply, as programs call it
        assert x.shape == (24,) and len(prof._get_inputs(with_output=True)) == 2
        res = AutoTuner.from_kernel(kernel=lambda block=None: add_one(24, block), configs=[
            {"block": 16}, {"block": 4}]).set_compile_args(out_idx=[-1]).set_profile_args(
            ref_prog=lambda x: x + 1).run(warmup=1, rep=1)
    assert res.config in ({"block": 16}, {"block": 4}) and res.latency > 0  # the faster one
    assert f"T.Kernel({-(-24 // res.config['block'])}" in str(res.kernel.ir)

    @tl.autotune(configs=[{"block": 8}, {"block": 4}])
    @tl.jit(out_idx=[-1])
    def tuned(N, block=None):
        return add_one(N, block)

    k8, k4 = tuned(24), tuned(24, block=4)
    assert k8.config in ({"block": 8}, {"block": 4}) and k8.latency > 0  # tuned: the faster
    assert f"T.Kernel({-(-24 // k8.config['block'])}" in str(k8.ir)
    assert k4.config == {} and "T.Kernel(6" in str(k4.ir)


def test_torch_tensors_in_and_out_share_memory(tl):
    torch = pytest.importorskip("torch")
    import tilelang.language as T

    @T.prim_func
    def halve(X: T.Tensor((8,), T.bfloat16), Y: T.Tensor((8,), T.bfloat16)):
        with T.Kernel(1) as _:
            for i in T.Parallel(8):
                Y[i] = X[i] * 0.5

    x = torch.arange(8, dtype=torch.bfloat16)
    y = torch.zeros(8, dtype=torch.bfloat16)
    with tilepy.backend("interp"):
        halve(x, y)  # written in place through the shared storage
    assert torch.equal(y, x * 0.5)
    k = tl.compile(halve, out_idx=[-1])
    with tilepy.backend("interp"):
        out = k(x)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert torch.equal(out, x * 0.5)


CLI_PROGRAM = textwrap.dedent('''
    import torch
    import tilelang
    import tilelang.language as T

    def add(M, N, block):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
                 C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block)) as (bx, by):
                for i, j in T.Parallel(block, block):
                    C[by * block + i, bx * block + j] = A[by * block + i, bx * block + j] + \\
                        B[by * block + i, bx * block + j]
        return main

    a = torch.randn(30, 50, device="cuda")
    b = torch.randn(30, 50).cuda()
    k = tilelang.compile(add(30, 50, 16), out_idx=-1)
    torch.testing.assert_close(k(a, b), a + b)
    print("checked", a.device)
''')


def test_tilepy_run_tilelang_runs_an_unchanged_cuda_program(tmp_path):
    pytest.importorskip("torch")
    prog = tmp_path / "cuda_prog.py"
    prog.write_text(CLI_PROGRAM)
    env = {**os.environ, "TILEPY_QUIET": "1"}
    run = [sys.executable, "-m", "tilepy.cli", "run", "--tilelang", "--backend", "interp"]
    ok = subprocess.run(run + ["--cuda-to-cpu", str(prog)], capture_output=True, text=True,
                        timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "checked cpu"


def test_cuda_mapping_is_opt_in(tl):
    torch = pytest.importorskip("torch")
    cuda = torch.Tensor.cuda
    compat.install()  # no cuda_to_cpu: torch untouched
    assert torch.Tensor.cuda is cuda


def test_int4_data_may_come_packed_in_int8_storage():
    import tilepy.language as T

    @T.prim_func
    def widen(Q: T.Tensor((2, 4), "int4"), Y: T.Tensor((2, 4), "int32")):
        with T.Kernel(1) as _:
            for i, j in T.Parallel(2, 4):
                Y[i, j] = T.cast(Q[i, j], "int32")

    packed = np.array([[0x21, 0x8F], [0x7E, 0x09]], dtype=np.uint8).view(np.int8)
    y = np.zeros((2, 4), np.int32)
    with tilepy.backend("interp"):
        widen(packed, y)
    assert y.tolist() == [[1, 2, -1, -8], [-2, 7, 9 - 16, 0]]


SEED_PROGRAM = textwrap.dedent('''
    import torch
    torch.cuda.init()  # a no-op under the mapping (torch without CUDA raises)
    torch.manual_seed(3)
    a = torch.randn(4, device="cuda")
    torch.cuda.manual_seed(3)
    b = torch.randn(4, device="cuda")
    torch.cuda.manual_seed_all(4)
    c = torch.randn(4).cuda()
    print(torch.equal(a, b), torch.equal(a, c), a.device, a.is_cuda, c.cuda().is_cuda)
''')


def test_cuda_seeding_under_the_mapping_seeds_the_cpu_generator_and_tensors_say_cuda(tmp_path):
    pytest.importorskip("torch")
    prog = tmp_path / "seed_prog.py"
    prog.write_text(SEED_PROGRAM)
    run = [sys.executable, "-m", "tilepy.cli", "run", "--cuda-to-cpu", str(prog)]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=120,
                        env={**os.environ, "TILEPY_QUIET": "1"})
    assert ok.returncode == 0, ok.stderr[-400:]
    assert ok.stdout.strip() == "True False cpu True True"  # CPU tensors stand for CUDA ones


def test_tilepy_run_passes_option_like_arguments_to_the_program(tmp_path):
    prog = tmp_path / "argv_prog.py"
    prog.write_text("import sys\nprint(sys.argv[1:])\n")
    run = [sys.executable, "-m", "tilepy.cli", "run", str(prog), "--h", "3", "--backend", "x"]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=60,
                        env={**os.environ, "TILEPY_QUIET": "1"})
    assert ok.returncode == 0, ok.stderr[-400:]
    assert ok.stdout.strip() == "['--h', '3', '--backend', 'x']"


def test_cuda_timing_events_under_the_mapping_time_on_the_cpu():
    import time

    from tilepy.compat.cuda_to_cpu import CpuEvent

    start, end = CpuEvent(enable_timing=True), CpuEvent(enable_timing=True)
    with pytest.raises(RuntimeError, match="two recorded events"):
        start.elapsed_time(end)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15.0 <= start.elapsed_time(end) < 2000.0


def test_kernel_params_and_result_idx_describe_the_arguments(tl):
    import tilelang.language as T

    @T.prim_func
    def pair(X: T.Tensor((6, 4), "float16"), S: T.Tensor((4,), "int32"),
             Y: T.Tensor((6, 4), "float16")):
        with T.Kernel(1) as _:
            for i, j in T.Parallel(6, 4):
                Y[i, j] = X[i, j] * S[j]

    k = tl.compile(pair, out_idx=[-1])
    assert k.result_idx == [2]
    assert [tuple(int(d) for d in p.shape) for p in k.params] == [(6, 4), (4,), (6, 4)]
    assert [str(p.dtype) for p in k.params] == ["float16", "int32", "float16"]
    ins = [np.ones([int(d) for d in p.shape], dtype=str(p.dtype))
           for i, p in enumerate(k.params) if i not in k.result_idx]
    with tilepy.backend("interp"):
        assert k(*ins).tolist() == [[1.0] * 4] * 6


def test_autotune_configs_may_carry_pass_configs(tl):
    import tilelang.language as T
    from tilelang.autotuner import AutoTuner

    def add_two(N, block=None):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block)) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] + 2.0
        return main

    configs = [{"block": b, "pass_configs": {tl.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: w}}
               for b, w in ((8, True), (4, False))]
    with tilepy.backend("interp"):
        res = AutoTuner.from_kernel(kernel=lambda block=None: add_two(16, block),
                                    configs=configs).set_compile_args(out_idx=[-1]) \
            .set_profile_args(ref_prog=lambda x: x + 2).run(warmup=1, rep=1)
    assert res.config in configs
    assert f"T.Kernel({16 // res.config['block']}" in str(res.kernel.ir)


def test_out_idx_counts_scalar_parameters_as_tilelang_does(tl):
    import tilelang.language as T

    @T.prim_func
    def scaled(X: T.Tensor((8,), "float32"), n: T.int32, Y: T.Tensor((8,), "float32")):
        with T.Kernel(1) as _:
            for i in T.Parallel(8):
                Y[i] = X[i] * n

    x = np.arange(8, dtype=np.float32)
    with tilepy.backend("interp"):
        for idx in ([2], [-1]):
            y = tl.compile(scaled, out_idx=idx)(x.copy(), 3)
            assert y.tolist() == [3.0 * i for i in range(8)]
    with pytest.raises(tilepy.errors.ArgumentError, match="scalar parameter 'n'"):
        tl.compile(scaled, out_idx=[1])


def test_the_integer_supply_gives_unsigned_buffers_0_to_2_as_tilelang_does(tl):
    from tilelang.utils.tensor import TensorSupplyType, make_input

    from tilepy.ir.expr import Buffer, Const
    from tilepy.ir.types import dtype

    shape = (Const(4096, dtype("int32")),)
    for supply in (TensorSupplyType.Auto, TensorSupplyType.Integer):
        u = np.asarray(make_input(Buffer("u", shape, dtype("uint8")), supply))
        s = np.asarray(make_input(Buffer("s", shape, dtype("int8")), supply))
        assert sorted(np.unique(u).tolist()) == [0, 1, 2]
        assert sorted(np.unique(s).tolist()) == [-2, -1, 0, 1, 2]


def test_autotune_config_limit_picks_a_deterministic_subset_and_refuses_bad_values(capsys):
    from tilepy.compat.tunelimit import pick
    from tilepy.errors import TuneError

    configs = [{"block": b} for b in (64, 32, 16, 8, 4)]
    assert pick(configs, "") is configs and pick(configs, "all") is configs
    assert pick(configs, "9") is configs and capsys.readouterr().err == ""
    assert pick(configs, "first") == [{"block": 64}]
    assert "autotune measures 1 of 5 configs (TILEPY_AUTOTUNE_CONFIGS=first)" in \
        capsys.readouterr().err
    assert pick(configs, "3") == configs[:3]
    sample = pick(configs, "random:3:7")
    assert sample == pick(configs, "random:3:7") and len(sample) == 3
    assert sample == [c for c in configs if c in sample]  # the program's order kept
    assert pick(configs, "random:2") == pick(configs, "random:2:0")  # seed 0 by default
    assert len({str(pick(configs, f"random:2:{s}")) for s in range(6)}) > 1  # seeds differ
    for bad in ("0", "-2", "some", "random:x", "random:2:-1", "first:2", "2.5"):
        with pytest.raises(TuneError, match=r"TILEPY_AUTOTUNE_CONFIGS .*must be all, first, "
                                            rf"a count N .*got '{re.escape(bad)}'"):
            pick(configs, bad)


def test_autotune_measures_all_configs_unless_limited(tl, monkeypatch, tmp_path, capsys):
    import tilelang.language as T
    from tilelang.autotuner import AutoTuner

    monkeypatch.setenv("TILEPY_CACHE_DIR", str(tmp_path))  # no tuning-cache answer

    seen = []

    @tl.autotune(configs=[{"block": 8}, {"block": 4}, {"block": 2}])
    @tl.jit(out_idx=[-1])
    def tuned(N, block=None):
        seen.append(block)

        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block)) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * 3.0
        return main

    monkeypatch.delenv("TILEPY_AUTOTUNE_CONFIGS", raising=False)
    with tilepy.backend("interp"):
        tuned(16)
        assert sorted(set(seen)) == [2, 4, 8]  # the default: all, as TileLang
        seen.clear()
        monkeypatch.setenv("TILEPY_AUTOTUNE_CONFIGS", "random:1:1")
        k = tuned(24)  # new sizes: nothing built before
    assert set(seen) == {k.config["block"]} and k.config == pick_one(1)
    x = np.arange(24, dtype=np.float32)
    with tilepy.backend("interp"):
        assert np.array_equal(k(x), x * 3)
        capsys.readouterr()
        seen.clear()
        tuned(32, block=2)  # a config named in the call: no tuning, no log line
        assert seen == [2] and capsys.readouterr().err == ""
        monkeypatch.setenv("TILEPY_AUTOTUNE_CONFIGS", "first")
        res = AutoTuner.from_kernel(kernel=lambda block=None: tuned.__wrapped__(40, block),
                                    configs=[{"block": 4}, {"block": 8}]).run()
    assert res.config == {"block": 4} and "measures 1 of 2" in capsys.readouterr().err


def pick_one(seed):
    from tilepy.compat.tunelimit import pick

    return pick([{"block": 8}, {"block": 4}, {"block": 2}], f"random:1:{seed}")[0]


TUNED_PROGRAM = textwrap.dedent('''
    import tilelang
    import tilelang.language as T

    @tilelang.autotune(configs=[{"block": 8}, {"block": 4}])
    @tilelang.jit(out_idx=[-1])
    def tuned(N, block=None):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block)) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] + 1.0
        return main

    print(tuned(16).config)
''')


def test_tilepy_run_autotune_configs_flag(tmp_path, capsys):
    from tilepy import cli

    prog = tmp_path / "tuned_prog.py"
    prog.write_text(TUNED_PROGRAM)
    run = [sys.executable, "-m", "tilepy.cli", "run", "--tilelang", "--backend", "interp"]
    env = {k: v for k, v in os.environ.items() if k != "TILEPY_AUTOTUNE_CONFIGS"}
    ok = subprocess.run(run + ["--autotune-configs", "first", str(prog)], capture_output=True,
                        text=True, timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr[-400:]
    assert ok.stdout.strip() == "{'block': 8}"
    assert "autotune measures 1 of 2 configs" in ok.stderr
    assert cli.main(["run", "--tilelang", "--autotune-configs", "none", str(prog)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and "got 'none'" in err
    assert err.startswith("tilepy: TILEPY_AUTOTUNE_CONFIGS (or --autotune-configs) must be")
    assert "TILEPY_AUTOTUNE_CONFIGS" not in os.environ  # nothing set up
