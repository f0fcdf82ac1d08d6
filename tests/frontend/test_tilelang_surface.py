"""TileLang's spellings in the front end: dtypes are strings, `assert` and `is` on
build-time values, T.clamp / T.Cast / T.alloc_buffer / T.parallel, hardware hints recorded
in the IR, and GPU-only features refused as not portable at the user's line."""

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import KernelAssertionError, NotPortableError, TileSyntaxError


def test_dtypes_are_strings_built_from_any_dtype():
    assert T.float32 == "float32" and isinstance(T.float16, str)
    assert T.float == "float32" and T.bf16 == "bfloat16" and T.int == "int32"
    assert T.dtype(np.float16) == "float16" and T.dtype(ml_dtypes.bfloat16) == "bfloat16"
    assert T.dtype("fp8_e4m3") == "float8_e4m3fn" and T.dtype(T.float32) == "float32"
    assert T.dtype("float8_e4m3fn").bits == 8 and T.dtype("int8").itemsize == 1
    assert T.float32(1.5) == np.float32(1.5) and T.dtype("bfloat16").as_numpy() == \
        np.dtype(ml_dtypes.bfloat16)
    with pytest.raises(tilepy.TilepyError):
        T.dtype("float7")


def test_dtype_as_torch_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    assert T.dtype(torch.bfloat16) == "bfloat16" and T.dtype(torch.float) == "float32"
    assert T.float16.as_torch() is torch.float16 and getattr(torch, T.float32) is torch.float32
    assert T.dtype("int4").as_torch() is torch.int8  # int4 data travels as int8 storage


def clamp_kernel(n, block, dtype=T.float32, scale=None, lo=-1.0):
    @T.prim_func
    def clamp_k(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        assert block % 4 == 0, "block must be a multiple of 4"
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            T.use_swizzle(panel_size=10)
            t = T.alloc_buffer((block,), dtype, scope="shared")
            T.annotate_layout({t: T.make_swizzled_layout(t)})
            T.copy(X[bx * block], t)
            for i in T.parallel(block):
                if scale is not None:
                    t[i] = t[i] * scale
                Y[bx * block + i] = T.clamp(T.Cast(dtype, t[i]), lo, 1.0)

    return clamp_k


def test_clamp_cast_alloc_buffer_parallel_and_hints_run_on_both_backends():
    k = clamp_kernel(40, 16, scale=3.0)
    text = str(k.ir)
    assert "# hint: T.use_swizzle(panel_size=10)" in text
    assert "# hint: T.annotate_layout({t: T.make_swizzled_layout(t)})" in text
    x = np.linspace(-1, 1, 40, dtype=np.float32)
    with tilepy.backend("interp"):
        a = np.zeros(40, np.float32)
        k(x, a)
    assert (a == np.clip(x * np.float32(3), -1, 1)).all()
    b = np.zeros(40, np.float32)
    with tilepy.backend("py"):
        k(x, b)
    assert (a.view(np.uint32) == b.view(np.uint32)).all()
    plain = clamp_kernel(40, 16)  # `scale is not None` false: no multiply
    assert "t[i] * 3.0" in text and "t[i] * " not in str(plain.ir)


def test_build_time_assert_fails_at_its_line_with_the_message():
    with pytest.raises(KernelAssertionError, match="block must be a multiple of 4") as info:
        clamp_kernel(40, 6)
    assert info.value.loc.line == clamp_kernel.__code__.co_firstlineno + 3


def test_runtime_assert_outside_a_launch_and_gpu_only_features_are_refused_clearly():
    with pytest.raises(TileSyntaxError, match="assert on a runtime value outside T.Kernel"):
        @T.prim_func
        def k(X: T.Tensor((8,), "float32")):
            assert X[0] > 0
            with T.Kernel(1) as bx:
                X[bx] = 1.0

    with pytest.raises(NotPortableError, match=r"not portable to the CPU reference: "
                       r"mbarriers \(T.alloc_barrier\)") as info:
        @T.prim_func
        def k2(X: T.Tensor((8,), "float32")):
            with T.Kernel(1) as _:
                T.alloc_barrier(1)  # planted

    assert "planted" in str(info.value)


def pair_adds(stride):
    @T.prim_func
    def pair_adds(S: T.Tensor((4, 8), "float32"), C: T.Tensor((4, 8), "float32")):
        with T.Kernel(2) as bx:
            for i, j in T.Parallel(2, 4):
                m, n = bx * 2 + i, j * stride
                T.atomic_addx2(C[m, n], S[m, n])  # planted: pair

    return pair_adds


def test_atomic_addx2_adds_element_pairs_and_the_jit_proves_them_apart():
    s = np.arange(32, dtype=np.float32).reshape(4, 8) * 0.25
    want = np.ones((4, 8), np.float32) + s
    outs = []
    for be in ("interp", "py"):
        c = np.ones((4, 8), np.float32)
        with tilepy.backend(be):
            pair_adds(2)(s, c)
        outs.append(c)
    assert (outs[0] == want).all() and (outs[1].view(np.uint32) == want.view(np.uint32)).all()
    # stride 1: lanes j and j + 1 both add to C[m, j + 1]; the JIT's lane order would differ
    with pytest.raises(tilepy.TilepyError, match="the same T.Parallel loop also adds to C"):
        with tilepy.backend("py"):
            pair_adds(1)(s, np.ones((4, 8), np.float32))


def test_slice_bounds_linear_in_one_term_give_a_constant_extent():
    @T.prim_func
    def rows(A: T.Tensor((8, 16), "float32"), B: T.Tensor((8, 16), "float32")):
        with T.Kernel(4) as bx:
            s = T.alloc_shared((2, 16), "float32")
            T.copy(A[bx * 2:(bx + 1) * 2, :], s)
            T.copy(s, B[(bx - 1) * 2 + 2:bx * 2 + 2, :])

    assert "A[bx * 2:bx * 2 + 2, 0:16]" in str(rows.ir)
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    b = np.zeros_like(a)
    with tilepy.backend("py"):
        rows(a, b)
    assert (a == b).all()


@tilepy.jit
def row_sums(X, block_m: int = 4):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), "float32")
    Y = T.empty((M,), "float32")
    with T.Kernel(T.ceildiv(M, block_m)) as bx:
        t = T.alloc_fragment((block_m, N), "float32")  # N is a build-time constant here
        s = T.alloc_fragment((block_m,), "float32")
        T.copy(X[bx * block_m, 0], t)
        T.reduce_sum(t, s, dim=1)
        T.copy(s, Y[bx * block_m])
    return Y


def test_t_const_sizes_are_constants_specialised_per_value():
    rng = np.random.default_rng(3)
    for n in (6, 9, 6):
        x = rng.standard_normal((10, n)).astype(np.float32)
        with tilepy.backend("interp"):
            a = row_sums(x)
        with tilepy.backend("py"):
            b = row_sums(x)
        want = np.zeros(10, np.float32)
        for j in range(n):  # the contract's order: ascending along the row
            want += x[:, j]
        assert (a == want).all() and (a.view(np.uint32) == b.view(np.uint32)).all()
    texts = [str(k.ir) for k in row_sums.built()]
    assert len(texts) == 2 and any("(4, 6)" in t for t in texts) and any("(4, 9)" in t
                                                                         for t in texts)


@tilepy.jit
def scaled_rows(X, S, block_m: int = 4):
    M, N = T.const("M, N")
    x_shape = [M, N]  # the shape in a variable, as TileLang's examples build it
    X: T.Tensor(x_shape, "float32")
    n = T.dynamic("n")  # a runtime size given bare, not in a tuple
    S: T.Tensor(n, "float32")
    Y = T.empty(x_shape, "float32")
    with T.Kernel(T.ceildiv(M, block_m)) as bx:
        t = T.alloc_fragment((block_m, N), "float32")  # N must be a build-time constant
        T.copy(X[bx * block_m, 0], t)
        for i, j in T.Parallel(block_m, N):
            t[i, j] = t[i, j] * S[0]
        T.copy(t, Y[bx * block_m, 0])
    return Y


def test_t_const_sizes_bind_through_shape_variables_and_bare_runtime_sizes():
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    s = np.array([2.0, 5.0], np.float32)
    with tilepy.backend("interp"):
        y = scaled_rows(x, s)
    assert np.array_equal(y, x * 2)
    assert "(4, 3)" in str(scaled_rows.built()[0].ir)


def test_integer_scalar_parameters_are_sizes_passed_by_position():
    @T.prim_func
    def head(X: T.Tensor((16,), "float32"), n: T.int32, Y: T.Tensor((16,), "float32")):
        with T.Kernel(1) as _:
            for i in T.Parallel(16):
                Y[i] = T.if_then_else(i < n, X[i], -1.0)

    x = np.arange(16, dtype=np.float32)
    for be, n in (("interp", 7), ("py", 7), ("py", 0)):
        y = np.zeros(16, np.float32)
        with tilepy.backend(be):
            head(x, n, y)
        assert y.tolist() == [float(i) if i < n else -1.0 for i in range(16)]
    assert 'n = T.dynamic("n")' in str(head.ir)
    with pytest.raises(tilepy.TilepyError, match=r"argument 1 \(n\) expected an int; got "
                       "float"):
        head(x, 2.5, np.zeros(16, np.float32))
    with pytest.raises(tilepy.TilepyError, match="expected an integer type"):
        @T.prim_func
        def bad(X: T.Tensor((16,), "float32"), a: T.bool):  # floats: test_tilelang_frames
            with T.Kernel(1) as _:
                X[0] = a


def test_reshape_re_views_storage_and_alloc_global_says_what_to_do():
    @T.prim_func
    def flat_copy(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1) as _:
            x = T.reshape(X, (32,))
            for i in T.Parallel(32):
                Y[i] = x[i] * 2.0

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    y = np.zeros(32, np.float32)
    with tilepy.backend("interp"):
        flat_copy(x, y)
    assert (y == x.reshape(-1) * 2).all()
    with pytest.raises(TileSyntaxError, match="T.alloc_global inside T.Kernel: expected it "
                                              "before the launch"):
        @T.prim_func
        def scratch(X: T.Tensor((4,), "float32")):
            with T.Kernel(1) as _:
                T.alloc_global((4,), "float32")


def test_im2col_gathers_the_zero_padded_patches_of_an_nhwc_image():
    n, h, w, c, k, s, d, p = 2, 6, 5, 3, 3, 1, 1, 1
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    bm, bk = 16, 8
    rows, cols = -(-n * oh * ow // bm) * bm, -(-k * k * c // bk) * bk

    @T.prim_func
    def patches(X: T.Tensor((n, h, w, c), "float32"), Col: T.Tensor((rows, cols), "float32")):
        with T.Kernel(cols // bk, rows // bm) as (bx, by):
            t = T.alloc_shared((bm, bk), "float32")
            T.im2col(X, t, by, bx, k, s, d, p)
            T.copy(t, Col[by * bm, bx * bk])

    x = np.random.default_rng(0).standard_normal((n, h, w, c)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    want = np.array([[xp[m // (oh * ow), m % (oh * ow) // ow * s + kk // (k * c) * d,
                         m % ow * s + kk // c % k * d, kk % c] for kk in range(k * k * c)]
                     for m in range(n * oh * ow)])
    for be in ("interp", "py"):
        got = np.zeros((rows, cols), np.float32)
        with tilepy.backend(be):
            patches(x, got)
        assert (got[:n * oh * ow, :k * k * c] == want).all(), be


def test_gemm_v2_is_gemm_and_ignores_its_gpu_options():
    @T.prim_func
    def mm(A: T.Tensor((16, 8), "float32"), B: T.Tensor((16, 8), "float32"),
           C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1) as _:
            c = T.alloc_fragment((16, 16), "float32")
            T.clear(c)
            T.gemm_v2(A, B, c, transpose_B=True, k_pack=2, policy=T.GemmWarpPolicy.FullRow)
            T.copy(c, C)

    a = np.arange(128, dtype=np.float32).reshape(16, 8) / 64
    c = np.zeros((16, 16), np.float32)
    with tilepy.backend("interp"):
        mm(a, a, c)
    assert np.allclose(c, a @ a.T, rtol=1e-6) and "T.gemm(A, B, c, transpose_B=True" in str(
        mm.ir)


def test_bitwise_operators_on_conditions_are_the_logical_ones():
    @T.prim_func
    def pick(M: T.Tensor((8,), "uint8"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1) as _:
            for j in T.Parallel(8):
                Y[j] = T.if_then_else((M[j] != 0) & (j < 6) | (j == 7) ^ (M[j] == 5), 1.0, 0.0)

    m = np.array([1, 0, 1, 5, 1, 1, 1, 0], np.uint8)
    y = np.zeros(8, np.float32)
    with tilepy.backend("interp"):
        pick(m, y)
    want = [((m[j] != 0) and j < 6) or ((j == 7) != (m[j] == 5)) for j in range(8)]
    assert y.tolist() == [float(w) for w in want] == [1, 0, 1, 1, 1, 1, 0, 1]


@tilepy.jit(out_idx=[-1])
def _split_sum(n, parts):
    @T.prim_func
    def k(X: T.Tensor((parts, n), "float32"), Y: T.Tensor((n,), "float32")):
        partial = T.alloc_buffer([parts, n], "float32")  # global scratch: per call, shared
        with T.Kernel(parts) as p:
            for i in T.Parallel(n):
                partial[p, i] = X[p, i] * 2
        with T.Kernel(1) as _:
            acc = T.alloc_fragment((n,), "float32")
            T.clear(acc)
            for q in T.serial(parts):
                for i in T.Parallel(n):
                    acc[i] += partial[q, i]
            T.copy(acc, Y)

    return k


@pytest.mark.parametrize("backend", ["interp", "jit"])
def test_a_global_scratch_buffer_outside_the_launches_is_allocated_per_call(backend):
    kern = _split_sum(8, 3)
    assert "-> Y:float32[8]>" in repr(kern) and "partial" not in repr(kern).split("->")[0]
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    with tilepy.backend(backend):
        y = kern(x)
        assert np.array_equal(y, 2 * x.sum(0)) and np.array_equal(kern(x), y)


def test_alloc_global_and_a_scratch_scope_that_is_not_global():
    @T.prim_func
    def twice(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
        tmp = T.alloc_global((4,), "float32")
        with T.Kernel(1) as _:
            for i in T.Parallel(4):
                tmp[i] = X[i] + 1
        with T.Kernel(1) as _:
            for i in T.Parallel(4):
                Y[i] = tmp[i] * 2

    y = np.zeros(4, np.float32)
    with tilepy.backend("interp"):
        twice(np.arange(4, dtype=np.float32), y)
    assert y.tolist() == [2.0, 4.0, 6.0, 8.0]
    with pytest.raises(tilepy.TilepyError, match="outside T.Kernel: expected a global buffer"):
        @T.prim_func
        def shared_outside(X: T.Tensor((4,), "float32")):
            s = T.alloc_buffer((4,), "float32", scope="shared")
            with T.Kernel(1) as _:
                X[0] = s[0]


def test_sync_grid_lets_every_block_see_what_all_blocks_wrote_before_it():
    @T.prim_func
    def rotate(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(4) as b:
            t = T.alloc_local((1,), "float32")
            t[0] = X[b] * 10
            Y[b] = t[0]
            T.sync_grid()  # every block's Y[b] is written before any block goes on
            t[0] = Y[(b + 1) % 4]
            X[b] = t[0] + b

    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    with tilepy.backend("interp"):
        rotate(x, y)
    assert x.tolist() == [10.0, 21.0, 32.0, 3.0] and y.tolist() == [0, 10, 20, 30]
    assert str(rotate.ir).count("with T.Kernel") == 2

    with pytest.raises(TileSyntaxError, match="t would have to"):
        @T.prim_func
        def carried(X: T.Tensor((4,), "float32")):
            with T.Kernel(4) as b:
                t = T.alloc_local((1,), "float32")
                t[0] = X[b]
                T.sync_grid()
                X[b] = t[0] + 1
    with pytest.raises(TileSyntaxError, match="got one inside a loop or a branch"):
        @T.prim_func
        def nested(X: T.Tensor((4,), "float32")):
            with T.Kernel(4) as b:
                for _ in T.serial(2):
                    T.sync_grid()
                X[b] = 0.0
