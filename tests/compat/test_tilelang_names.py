"""The rest of TileLang's Python surface that example programs import: `tilelang.carver`
(the device query works, the GPU recommender is refused), `tilelang.engine.param`,
`tilelang.cache` (tilepy's caches), `tilelang.DataType`, `tilelang.transform`,
`intrinsics.get_swizzle_layout` (the swizzle permutation) and its MMA emitters (refused),
and `T.SharedTensor`-style macro annotations."""

import os

import numpy as np
import pytest

import tilepy
from tilepy import compat
from tilepy.errors import NotPortableError


@pytest.fixture
def tl():
    assert compat.install()
    import tilelang

    yield tilelang
    compat.uninstall()


def test_carver_counts_cores_and_refuses_the_gpu_recommender(tl):
    from tilelang.carver.arch import CUDA, driver
    from tilelang.carver.roller.rasterization import NoRasterization
    from tilelang.carver.template import MatmulTemplate

    assert driver.get_num_sms() == len(os.sched_getaffinity(0))
    assert issubclass(NoRasterization, tl.carver.roller.rasterization.Rasterization)
    template = MatmulTemplate(M=64, N=64, K=64, in_dtype="float16")
    with pytest.raises(NotPortableError, match="the carver's GPU tile recommender"):
        template.with_arch(None)
    with pytest.raises(NotPortableError, match="CUDA architecture model"):
        CUDA("cuda")


def test_engine_param_datatype_transform_and_shared_tensor(tl):
    import tilelang.language as T
    from tilelang.engine.param import KernelParam
    from tilelang.transform import simplify_prim_func

    p = KernelParam("float16", (2, 3))
    assert p.shape == (2, 3) and not p.is_scalar() and KernelParam("int32", ()).is_scalar()
    assert tl.DataType("float16").bits == 16 and tl.DataType("int8").bits == 8
    assert T.SharedTensor is T.Tensor and T.LocalTensor is T.Tensor
    assert simplify_prim_func(len) is len


def test_clear_cache_empties_the_memory_and_disk_caches(tl, tmp_path, monkeypatch):
    from tilelang.cache import clear_cache

    from tilepy.jit import compiler, diskcache

    monkeypatch.setenv("TILEPY_CACHE_DIR", str(tmp_path))
    folder = diskcache.cache_dir()
    (folder / "k1").mkdir()
    (folder / "k1" / "mod.py").write_text("x = 1\n")
    (folder / "index.json").write_text("{}")
    compiler._MEMORY["probe"] = object()
    clear_cache()
    assert list(folder.iterdir()) == [] and "probe" not in compiler._MEMORY


def test_get_swizzle_layout_permutes_each_rows_16_byte_units(tl):
    from tilelang.intrinsics import get_swizzle_layout

    # fp16 rows of 64 (1024 bits): unit j of row r moves to unit j ^ (r % 8)
    got = [[get_swizzle_layout(r, c, 64, "float16")[1] // 8 for c in range(0, 64, 8)]
           for r in range(8)]
    assert got[1] == [1, 0, 3, 2, 5, 4, 7, 6] and got[7] == [7, 6, 5, 4, 3, 2, 1, 0]
    assert get_swizzle_layout(3, 13, 64, "float16") == (3, 2 * 8 + 5)
    # fp16 rows of 32 (512 bits): rows pair up, unit j goes to j ^ ((r % 8) // 2)
    got = [[get_swizzle_layout(r, c, 32, "float16")[1] // 8 for c in range(0, 32, 8)]
           for r in range(8)]
    assert got[2] == got[3] == [1, 0, 3, 2] and got[6] == [3, 2, 1, 0]
    for r in range(8):  # each row is a permutation
        assert sorted(get_swizzle_layout(r, c, 64, "float16")[1] for c in range(64)) == \
            list(range(64))
    with pytest.raises(ValueError, match="not a multiple of 512 bits"):
        get_swizzle_layout(0, 0, 16, "float16")


def test_mma_emitters_refuse_the_options_they_do_not_model(tl):
    # the emitters run as a CPU model (tests/compat/test_tilelang_mma.py); TileLang's
    # default b_transposed=False is a layout the model does not cover
    from tilelang.intrinsics.mma_macro_generator import TensorCoreIntrinEmitter

    with pytest.raises(NotPortableError, match="option a_transposed/b_transposed") as e:
        TensorCoreIntrinEmitter(a_dtype="float16", warp_row_tiles=16, warp_col_tiles=16)
    assert "T.gemm" in e.value.hint


def test_shared_tensor_annotated_macro_runs(tl):
    import tilelang.language as T

    @T.macro
    def double(src: T.Tensor, buf: T.SharedTensor, i: T.int32):
        T.copy(src[i * 4], buf)
        for j in T.Parallel(4):
            src[i * 4 + j] = buf[j] * 2

    @T.prim_func
    def k(X: T.Tensor((8,), "float32")):
        with T.Kernel(2) as bx:
            s = T.alloc_shared((4,), "float32")
            double(X, s, bx)

    x = np.arange(8, dtype=np.float32)
    with tilepy.backend("interp"):
        k(x)
    assert x.tolist() == [2 * v for v in range(8)]


def test_a_jit_function_may_return_another_kernels_prim_func(tl):
    import tilelang.language as T

    @tl.jit(out_idx=[-1])
    def scale(n, factor):
        @T.prim_func
        def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
            with T.Kernel(1):
                for i in T.Parallel(n):
                    Y[i] = X[i] * factor

        return k

    @tl.autotune(configs=[{"factor": 3.0}, {"factor": 5.0}])
    @tl.jit(out_idx=[-1])
    def tuned(factor=None):
        return scale(4, factor).prim_func

    with tilepy.backend("interp"):
        k = tuned()
        y = k(np.arange(4, dtype=np.float32))
    # the tuner keeps whichever config ran faster: the kernel is that config's
    assert k.config in ({"factor": 3.0}, {"factor": 5.0}) and k.latency > 0
    assert np.array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * k.config["factor"])


def test_vectorized_loops_conv_template_and_a_missing_name_that_says_so(tl):
    import tilelang.language as T
    from tilelang.carver.template import ConvTemplate

    from tilepy.errors import TileSyntaxError

    @T.prim_func
    def scale(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(2) as bx:
            for v in T.vectorized(4):
                Y[bx * 4 + v] = X[bx * 4 + v] * 3

    y = np.zeros(8, np.float32)
    with tilepy.backend("interp"):
        scale(np.arange(8, dtype=np.float32), y)
    assert y.tolist() == [3.0 * v for v in range(8)]
    with pytest.raises(NotPortableError, match="GPU tile recommender"):
        ConvTemplate(N=1, C=8, H=4, W=4, F=8, K=3, S=1, D=1, P=1).with_arch(None)
    with pytest.raises(TileSyntaxError) as e:
        @T.prim_func
        def barrier(X: T.Tensor((8,), "float32")):
            with T.Kernel(2) as bx:
                T.frobnicate_grid()
                X[bx] = 1.0
    assert "T.frobnicate_grid: expected a name of tilelang.language; it has no " \
           "'frobnicate_grid'" in str(e.value) and "<module" not in str(e.value)


def test_device_queries_under_the_cuda_mapping_describe_the_cpu():
    import types

    from tilepy.compat import cuda_to_cpu

    cuda = types.SimpleNamespace()
    cuda_to_cpu._queries(cuda)  # what patch() installs on torch.cuda
    assert cuda.get_device_capability() == cuda.get_device_capability(0) == (8, 0)
    props = cuda.get_device_properties(0)
    assert (props.major, props.minor) == (8, 0) and props.total_memory > 0
    assert props.multi_processor_count == len(os.sched_getaffinity(0))
    assert cuda.device_count() == 1 and "cpu" in cuda.get_device_name(0)


def _ptr_scale(T):
    @T.prim_func
    def scale(P: T.Tensor((3,), T.ptr), F: T.Tensor((3,), "float32")):
        with T.Kernel(3) as g:
            x = T.make_tensor(P[g], (2, 4), "float32")  # group g's own tensor
            tile = T.alloc_fragment((2, 4), "float32")
            T.copy(x[0, 0], tile)
            for i, j in T.Parallel(2, 4):
                x[i, j] = tile[i, j] * F[g] + x[1, 3] * 0

    return scale


def test_make_tensor_reads_and_writes_the_tensors_a_pointer_table_names(tl):
    import tilelang.language as T

    groups = [np.arange(8, dtype=np.float32).reshape(2, 4) + 10 * g for g in range(3)]
    before = [g.copy() for g in groups]
    table = np.array([g.ctypes.data for g in groups], np.int64)
    with tilepy.backend("interp"):
        _ptr_scale(T)(table, np.array([1.0, 2.0, -1.0], np.float32))
    for g, (got, was) in enumerate(zip(groups, before)):
        assert np.array_equal(got, was * [1.0, 2.0, -1.0][g]), g


def test_a_pointer_table_with_a_bad_address_is_an_argument_error(tl):
    import tilelang.language as T

    from tilepy.errors import ArgumentError

    ok = np.zeros((2, 4), np.float32)
    table = np.array([ok.ctypes.data, 16, ok.ctypes.data], np.int64)
    with tilepy.backend("interp"), pytest.raises(ArgumentError, match=r"P\[1\]: expected "
                                                 r"the address of 32 writable bytes"):
        _ptr_scale(T)(table, np.ones(3, np.float32))


def test_pass_config_key_is_also_importable_from_transform(tl):
    from tilelang.transform import PassConfigKey

    assert PassConfigKey is tl.PassConfigKey
    assert PassConfigKey.TL_DISABLE_WARP_SPECIALIZED is tl.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
    with pytest.raises(ImportError):
        from tilelang.transform import NoSuchPass  # noqa: F401


def test_fp8_e4m3_selection_and_the_while_frame_with_a_tile_level_barrier(tl):
    import tilelang.language as T
    from tilelang.utils import select_fp8_e4m3_dtype, select_torch_fp8_e4m3_dtype

    assert select_fp8_e4m3_dtype() == "float8_e4m3fn"
    torch = pytest.importorskip("torch")
    assert select_torch_fp8_e4m3_dtype() is torch.float8_e4m3fn

    @T.prim_func
    def strided(X: T.Tensor((10,), "float32"), Y: T.Tensor((10,), "float32")):
        with T.Kernel(2) as b:  # block b handles pairs b, b + 2, b + 4, ...
            i = T.alloc_var("int32")
            i = b
            with T.While(i < 5):
                cur = i
                off = cur * 2
                S = T.alloc_shared((2,), "float32")
                T.copy(X[off:off + 2], S)
                T.sync_threads()  # in a tile-level kernel: orders nothing more, kept out
                for j in T.Parallel(2):
                    Y[off + j] = S[j] * 2.0
                i = cur + 2

    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    with tilepy.backend("interp"):
        tilepy.compile(strided)(x, y)
    assert np.array_equal(y, x * 2)


def test_iket_events_are_recorded_hints_and_its_host_helpers_work(tl, tmp_path):
    import tilelang.language as T

    from tilepy.errors import TileSyntaxError

    @T.prim_func
    def traced(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=4) as bx:
            with T.iket.range("block"):
                T.iket.mark("enter", payload=T.iket.payload(bx, dtype="int32"))
                for i in T.Parallel(4):
                    T.iket.range_push("store")
                    Y[bx * 4 + i] = X[bx * 4 + i] * 2.0
                    T.iket.range_pop("store")

    with T.iket.session(output_dir=tmp_path / "iket", runtime_payloads=True):
        assert T.iket.runtime_payloads_enabled() and T.iket.is_enabled()
        kernel = tl.compile(traced, target="cuda", execution_backend="cython")
        out = T.iket.output_path("k.cu")
    assert not T.iket.runtime_payloads_enabled() and not T.iket.is_enabled()
    assert out == (tmp_path / "iket" / "k.cu").absolute() and out.parent.is_dir()
    assert T.iket.trace_files(directory=tmp_path / "iket") == []
    text = str(kernel.ir)
    assert "# hint: T.iket.range('block')" in text
    assert "# hint: T.iket.mark('enter', payload=T.iket.payload(bx, dtype='int32'))" in text
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    with tilepy.backend("interp"):
        kernel(x, y)
    assert np.array_equal(y, x * 2)

    with pytest.raises(TileSyntaxError, match=r"T.iket.range_pop\('b'\) does not match "
                       r"the open range 'a'"):
        @T.prim_func
        def crossed(X: T.Tensor((8,), "float32")):
            with T.Kernel(1) as _:
                T.iket.range_push("a")
                X[0] = 1.0
                T.iket.range_pop("b")


def test_t_grid_nests_serial_loops_and_fp8_type_queries_take_a_device(tl):
    import tilelang.language as T

    @T.prim_func
    def order(Y: T.Tensor((6,), "int32")):
        with T.Kernel(1) as _:
            n = T.alloc_var("int32")
            n = 0
            for i, j in T.grid(2, 3):  # row-major, one iteration at a time
                Y[n] = i * 10 + j
                n = n + 1

    y = np.zeros(6, np.int32)
    with tilepy.backend("interp"):
        tilepy.compile(order)(y)
    assert y.tolist() == [0, 1, 2, 10, 11, 12]
    from tilelang.language.fp8 import determine_fp8_type, determine_torch_fp8_type

    assert determine_fp8_type("e5m2", device="cuda:0") == "float8_e5m2"
    torch = pytest.importorskip("torch")
    assert determine_torch_fp8_type(device=torch.device("cpu")) is torch.float8_e4m3fn
