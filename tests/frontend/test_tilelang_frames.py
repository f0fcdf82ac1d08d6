"""TileLang's TVMScript spellings in kernels: `with T.If(c), T.Then():` and `with T.If(c):`
holding T.Then/T.Else frames, the `else:` of a for loop (ignored, as TileLang ignores it,
with a warning), and TVM's `x.dtype` / `x.astype(dt)` on runtime values."""

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import TileLangWarning, TileSyntaxError, TileTypeError


@T.prim_func
def frames(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32"),
           Z: T.Tensor((8,), "float32")):
    with T.Kernel(1) as bx:
        for i in T.Parallel(8):
            with T.If(X[i] > 0), T.Then():
                Y[i] = X[i] * 2
            with T.If(i < 3):
                with T.Then():
                    Z[i] = 1.0
                with T.Else():
                    Z[i] = X[i] + bx


def test_if_then_else_frames_are_branches():
    x = np.array([1, -2, 3, -4, 5, -6, 7, -8], np.float32)
    y, z = np.full(8, 9, np.float32), np.zeros(8, np.float32)
    with tilepy.backend("interp"):
        frames(x, y, z)
    assert y.tolist() == [2, 9, 6, 9, 10, 9, 14, 9]
    assert z.tolist() == [1, 1, 1, -4, 5, -6, 7, -8]


def test_a_then_frame_outside_an_if_is_refused_at_its_line():
    def bad(X: T.Tensor((8,), "float32")):
        with T.Kernel(1):
            with T.Then():
                X[0] = 1.0

    with pytest.raises(TileSyntaxError, match=r"T\.If\(cond\)") as e:
        T.prim_func(bad)
    assert e.value.loc.line == bad.__code__.co_firstlineno + 2


def masked(X: T.Tensor((4, 4), "float32")):
    with T.Kernel(1):
        for i, j in T.Parallel(4, 4):
            X[i, j] = T.if_then_else(i >= j, X[i, j], -1.0)
        else:
            T.clear(X)


def test_for_else_is_ignored_as_tilelang_does_with_a_warning_naming_the_line():
    with pytest.warns(TileLangWarning, match=rf":{masked.__code__.co_firstlineno + 5}: the "
                      r"`else:` of a for loop in a kernel is ignored"):
        k = T.prim_func(masked)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    with tilepy.backend("interp"):
        k(x)
    assert x.tolist() == np.where(np.tri(4) > 0, np.arange(16).reshape(4, 4), -1).tolist()


def unpack(val, pos):
    """A TVM-style helper: reads the dtype of a runtime value and casts with astype."""
    assert val.dtype == "uint8"
    return ((val >> (pos.astype("uint8") * 4)) & 15).astype("int32")


@T.prim_func
def nibbles(B: T.Tensor((4,), "uint8"), Out: T.Tensor((8,), "int32"),
            D: T.Tensor((8,), "float32")):
    with T.Kernel(1):
        for i in T.Parallel(8):
            Out[i] = unpack(B[i // 2], i % 2)
            D[i] = B[i // 2].astype("float32") * 0.5 if B.dtype == "uint8" else 0.0


def test_dtype_and_astype_of_runtime_values_in_helpers_and_kernels():
    b = np.array([0x21, 0x43, 0xF5, 0x07], np.uint8)
    out, d = np.zeros(8, np.int32), np.zeros(8, np.float32)
    with tilepy.backend("interp"):
        nibbles(b, out, d)
    assert out.tolist() == [1, 2, 3, 4, 5, 15, 7, 0]
    assert d.tolist() == (np.repeat(b, 2).astype(np.float32) * 0.5).tolist()


@T.prim_func
def persistent(X: T.Tensor((4, 5), "float32"), Y: T.Tensor((4, 5), "float32"),
               Seen: T.Tensor((4, 5), "int32")):
    with T.Kernel(3) as block_id:
        for bx, by in T.Persistent([4, 5], 3, block_id):
            Y[bx, by] = X[bx, by] * 2
            T.atomic_add(Seen[bx, by], 1)


def test_persistent_loop_visits_every_tile_of_the_domain_once():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    y, seen = np.zeros((4, 5), np.float32), np.zeros((4, 5), np.int32)
    with tilepy.backend("interp"):
        persistent(x, y, seen)
    assert (y == 2 * x).all() and (seen == 1).all()
    assert "for wave in T.serial((4 * 5 + (3 - 1)) // 3):" in str(persistent.ir)


@T.prim_func
def persistent_kernel(A: T.Tensor((48, 40), "float32"), B: T.Tensor((40, 32), "float32"),
                      C: T.Tensor((48, 32), "float32"), Seen: T.Tensor((3, 2), "int32")):
    with T.PersistentKernel(T.ceildiv(32, 16), T.ceildiv(48, 16), threads=128,
                            order="row", panel_size=2) as (bx, by):
        A_s = T.alloc_shared((16, 8), "float32")
        B_s = T.alloc_shared((8, 16), "float32")
        C_f = T.alloc_fragment((16, 16), "float32")
        T.clear(C_f)
        for k in T.Pipelined(5, num_stages=3):
            T.copy(A[by * 16, k * 8], A_s)
            T.copy(B[k * 8, bx * 16], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 16, bx * 16])
        T.atomic_add(Seen[by, bx], 1)


def test_persistent_kernel_computes_every_tile_once_as_t_kernel_does():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((48, 40)).astype(np.float32)
    b = rng.standard_normal((40, 32)).astype(np.float32)
    c, seen = np.zeros((48, 32), np.float32), np.zeros((3, 2), np.int32)
    with tilepy.backend("interp"):
        persistent_kernel(a, b, c, seen)
    want = np.zeros((48, 32), np.float32)
    for k in range(40):  # k ascending, one rounding per multiply and per add
        want = want + a[:, k:k + 1] * b[k:k + 1, :]
    np.testing.assert_array_equal(c, want)
    assert (seen == 1).all()
    text = str(persistent_kernel.ir)
    assert "T.Kernel(2, 3, threads=128)" in text
    assert "T.PersistentKernel(order='row', panel_size=2)" in text


def sign_extend(nibble):
    """TVM's idiom: shift a 4-bit value to the top of a byte, reinterpret, shift back."""
    return T.reinterpret("int8", nibble << 4) >> 4


@T.prim_func
def int4s(B: T.Tensor((4,), "uint8"), Out: T.Tensor((4,), "int8")):
    with T.Kernel(1):
        for i in T.Parallel(4):
            Out[i] = sign_extend(B[i] & 15)


def test_reinterpret_in_a_helper_in_tvm_argument_order():
    b = np.array([0x07, 0x08, 0x0F, 0x31], np.uint8)
    out = np.zeros(4, np.int8)
    with tilepy.backend("interp"):
        int4s(b, out)
    assert out.tolist() == [7, -8, -1, 1]


def test_a_buffers_dtype_is_a_string_with_the_ir_dtypes_attributes():
    seen = []

    @T.prim_func
    def k(X: T.Tensor((2,), "bfloat16")):
        with T.Kernel(1):
            seen.append(X.dtype)
            X[0] = T.cast(1.5, X.dtype)

    (dt,) = seen
    assert dt == "bfloat16" and dt.name == "bfloat16" and dt.is_float and dt.bits == 16


@T.prim_func
def axpb(X: T.Tensor((4,), "float32"), a: T.float32, n: T.int32, b: T.float16,
         Y: T.Tensor((4,), "float32")):
    with T.Kernel(1):
        for i in T.Parallel(4):
            Y[i] = X[i] * a + T.cast(b, "float32") + n


def test_float_scalar_parameters_take_numbers_rounded_to_their_dtype():
    x = np.arange(4, dtype=np.float32)
    outs = []
    for backend in ("interp", "jit"):
        y = np.zeros(4, np.float32)
        with tilepy.backend(backend):
            axpb(x, 0.1, 2, 0.1, y)
        outs.append(y)
    want = x * np.float32(0.1) + np.float32(np.float16(0.1)) + np.float32(2)
    assert outs[0].tobytes() == outs[1].tobytes() == want.tobytes()
    assert 'a: T.Tensor((1,), "float32")' in str(axpb.ir).replace("'", '"')


SHAPE = (2, 3)


@T.prim_func
def comprehensions(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
    with T.Kernel(1):
        for i in T.Parallel(4):
            n = sum(s for s in SHAPE)  # build time: 5
            doubled = [s * 2 for s in SHAPE if s > 2]  # [6]
            terms = {j: X[j] * (j + 1) for j in range(4)}  # runtime elements
            Y[i] = n + doubled[0] + sum(terms[j] for j in (1, 3)) + i


def test_comprehensions_over_build_time_sequences_are_unrolled():
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.zeros(4, np.float32)
    with tilepy.backend("interp"):
        comprehensions(x, y)
    assert y.tolist() == [11 + 4 + 16 + i for i in range(4)]


def test_a_comprehension_over_a_runtime_value_is_refused_at_its_line():
    def bad(X: T.Tensor((4,), "float32"), n: T.int32):
        with T.Kernel(1):
            X[0] = sum(X[j] for j in n)

    with pytest.raises(TileTypeError, match="comprehension in a kernel cannot iterate") as e:
        T.prim_func(bad)
    assert e.value.loc.line == bad.__code__.co_firstlineno + 2


@T.prim_func
def block_ids(Y: T.Tensor((3, 2), "int32")):
    with T.Kernel(2, 3):
        bx = T.get_block_binding(0)
        by = T.get_block_binding(1)
        Y[by, bx] = by * 10 + bx


def test_get_block_binding_is_the_launchs_block_index():
    y = np.zeros((3, 2), np.int32)
    with tilepy.backend("interp"):
        block_ids(y)
    assert y.tolist() == [[0, 1], [10, 11], [20, 21]]


def test_loops_around_launches_unroll_with_folded_bounds():
    @T.prim_func
    def rounds(X: T.Tensor((4,), "int32")):
        n = T.Cast("int32", T.ceil(T.log2(T.Cast("float32", 5))))  # 3, a literal expression
        for i in range(n - 1):
            with T.Kernel(1):
                for j in T.vectorized(4):  # a serial loop
                    X[j] = X[j] * 2 + i
    x = np.arange(4, dtype=np.int32)
    with tilepy.backend("interp"):
        rounds(x)
    assert x.tolist() == [1, 5, 9, 13]  # (x * 2 + 0) * 2 + 1
    with pytest.raises(TileSyntaxError, match="loop around T.Kernel launches needs bounds"):
        @T.prim_func
        def bad(X: T.Tensor((4,), "int32")):
            for i in range(X[0]):
                with T.Kernel(1):
                    X[0] = i
