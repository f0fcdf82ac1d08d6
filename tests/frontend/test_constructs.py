"""Each construct of the language, written as a user would, run in the interpreter and
checked against numpy: loops of every kind, while, atomics, cumsum, re-views, print,
breakpoint, bit ops, helpers, T.Tensor[...] and T.Pipelined(start, stop)."""

import ml_dtypes
import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import TileTypeError
from tilepy.ir.ops import FUNCTIONS, OPS
from tilepy.ir.printer import format_func
from tilepy.ir.types import float32


def _interp(kernel, *args):
    with tilepy.backend("interp"):
        return kernel(*args)


def test_while_unroll_and_pipelined_start_stop():
    @T.prim_func
    def k(X: T.Tensor[[16], T.int32], Y: T.Tensor[[16], T.int32]):
        with T.Kernel(1) as _:
            t = T.alloc_local((16,), "int32")
            T.copy(X, t)
            for i in T.serial(16):
                n = T.alloc_var("int32", init=0)
                v = T.alloc_var("int32", init=t[i])
                while v > 1:  # Collatz steps
                    v = T.if_then_else(v % 2 == 0, v // 2, 3 * v + 1)
                    n += 1
                t[i] = n
            for j in T.unroll(2):
                t[j] = t[j] + 100
            for j in T.Pipelined(4, 6, num_stages=2):
                t[j] = -t[j]
            T.copy(t, Y)

    x = np.arange(1, 17, dtype=np.int32)
    y = np.zeros(16, np.int32)
    _interp(k, x, y)

    def collatz(v):
        n = 0
        while v > 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            n += 1
        return n

    want = np.array([collatz(int(v)) for v in x])
    want[:2] += 100
    want[4:6] *= -1
    assert np.array_equal(y, want)


def test_atomic_add_is_deterministic_in_block_order():
    @tilepy.jit(out_idx=[-1])
    def hist(bins=8):
        n = T.symbolic("n")

        @T.prim_func
        def hist(X: T.Tensor((n,), "float32"), H: T.Tensor((bins,), "float32")):
            with T.Kernel(T.ceildiv(n, 32)) as bx:
                for i in T.serial(32):
                    idx = bx * 32 + i
                    if idx < n:
                        T.atomic_add(H[T.cast(T.abs(X[idx]) * 1000, "int32") % bins], X[idx])

        return hist

    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    h = _interp(hist(), x)
    want = np.zeros(8, np.float32)
    for v in x:  # blocks in order, then program order: sequential float32 adds
        want[int(np.float32(abs(v)) * np.float32(1000)) % 8] += v
    assert np.array_equal(h, want)


def test_cumsum_forward_and_reverse_and_re_view():
    @T.prim_func
    def k(X: T.Tensor((4, 8), "float32"), F: T.Tensor((4, 8), "float32"),
          R: T.Tensor((32,), "float32")):
        with T.Kernel(1) as _:
            flat = T.Tensor((32,), "float32", X.data)
            a = T.alloc_fragment((4, 8), "float32")
            b = T.alloc_fragment((4, 8), "float32")
            r = T.alloc_fragment((32,), "float32")
            T.copy(X, a)
            T.cumsum(a, b, dim=1)
            T.copy(b, F)
            T.copy(flat, r)
            T.cumsum(r, reverse=True)
            T.copy(r, R)

    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    f, r = np.zeros_like(x), np.zeros(32, np.float32)
    _interp(k, x, f, r)
    assert np.array_equal(f, np.add.accumulate(x, axis=1))  # sequential float32
    assert np.array_equal(r, np.add.accumulate(x.reshape(-1)[::-1])[::-1])


def test_a_re_view_of_a_fragment_shares_its_storage():
    """`T.Tensor(shape, dtype, frag.data)` inside a kernel views the fragment's storage:
    a write through one name is read through the other (the interpreter gave the view
    storage of its own, all zeros)."""
    @T.prim_func
    def k(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((32,), "float32"),
          Z: T.Tensor((4, 8), "float32")):
        with T.Kernel(1) as _:
            a = T.alloc_fragment((1, 4, 8), "float32")
            flat = T.Tensor((32,), "float32", a.data)
            T.copy(X, a)
            T.copy(flat, Y)
            for i in T.Parallel(32):
                flat[i] = flat[i] * 2.0
            T.copy(a, Z)

    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    y, z = np.zeros(32, np.float32), np.zeros((4, 8), np.float32)
    _interp(k, x, y, z)
    assert np.array_equal(y, x.reshape(-1)) and np.array_equal(z, x * 2)


def test_bit_ops_shifts_and_reinterpret():
    @T.prim_func
    def k(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "int32")):
        with T.Kernel(1) as _:
            for i in T.Parallel(64):
                bits = T.reinterpret(X[i], "int32")
                Y[i] = ((bits >> 23) & 0xFF) ^ (bits << 9 >> 31)

    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.int32)
    _interp(k, x, y)
    b = x.view(np.int32)
    assert np.array_equal(y, ((b >> 23) & 0xFF) ^ ((b << 9) >> 31))


def gelu(x):
    return 0.5 * x * (1.0 + T.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def test_python_helpers_and_build_time_loops():
    scales = [1.0, 2.0, 4.0]

    @T.prim_func
    def k(X: T.Tensor((3, 16), "bfloat16"), Y: T.Tensor((3, 16), "bfloat16")):
        with T.Kernel(1) as _:
            for r, s in enumerate(scales):  # unrolled while the kernel is built
                for j in T.Parallel(16):
                    Y[r, j] = gelu(X[r, j]) * s

    x = np.random.default_rng(3).standard_normal((3, 16)).astype(ml_dtypes.bfloat16)
    y = np.zeros_like(x)
    _interp(k, x, y)
    xf = x.astype(np.float32)
    # the helper's ops on bf16 values: each op in float32 rounded to bf16 (the contract)
    bf = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    c1, c2 = bf(np.float32(0.7978845608)), bf(np.float32(0.044715))
    cube = bf(bf(bf(c2 * xf) * xf) * xf)
    inner = bf(np.tanh(bf(c1 * bf(xf + cube)).astype(np.float64)).astype(np.float32))
    want = bf(bf(bf(np.float32(0.5) * xf) * bf(1 + inner)) * np.array(scales,
                                                                     np.float32)[:, None])
    assert np.array_equal(y.astype(np.float32), want)


def _scalar_kernel(fn, dt: str, arity: int):
    if arity == 1:
        @T.prim_func
        def k(X: T.Tensor((8,), dt), Y: T.Tensor((8,), dt)):
            with T.Kernel(1) as _:
                for i in T.Parallel(8):
                    Y[i] = fn(X[i])
        return k

    @T.prim_func
    def k(X: T.Tensor((8,), dt), Y: T.Tensor((8,), dt)):
        with T.Kernel(1) as _:
            for i in T.Parallel(8):
                Y[i] = fn(X[i], X[7 - i])
    return k


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_scalar_function_works_in_the_body_and_in_a_helper(name):
    """T.<name> builds the same IR in a kernel body and in a traced Python helper: the two
    front-end name maps are built from the op table (the helper's once lacked bitwise_*,
    floordiv, floormod and shift_*)."""
    op = FUNCTIONS[name]
    arity = OPS[op].arity
    try:
        OPS[op].type_rule((float32,) * arity)
        dt = "float32"
    except TileTypeError:
        dt = "int32"
    fn = getattr(T, name)

    def helper(*args):
        return fn(*args)

    body, traced = _scalar_kernel(fn, dt, arity), _scalar_kernel(helper, dt, arity)
    assert f"<Op.{op.name}: " in repr(body.func.body)
    assert format_func(traced.func, locs=False) == format_func(body.func, locs=False)


def test_print_and_breakpoint(capsys, monkeypatch):
    seen = {}

    def hook(*args, **kwargs):
        import sys
        frame = sys._getframe(1)
        seen.update({k: v for k, v in frame.f_locals.items() if k in ("t", "bx")})

    monkeypatch.setattr("sys.breakpointhook", hook)

    @T.prim_func
    def k(X: T.Tensor((2, 4), "float32")):
        with T.Kernel(2) as bx:
            t = T.alloc_fragment((4,), "float32")
            T.copy(X[bx, 0], t)
            print("block", bx, "first", t[0])
            T.print(t[1], msg="second")
            if bx == 1:
                breakpoint()

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    _interp(k, x)
    out = capsys.readouterr().out
    assert "block 0 first 0.0" in out and "block 1 first 4.0" in out
    assert "second 1.0" in out and "second 5.0" in out
    assert np.array_equal(np.asarray(seen["t"]).reshape(-1)[-4:], x[1])


def test_fp8_round_trip_through_shared_memory_saturating_cast():
    @T.prim_func
    def k(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float8_e4m3fn")):
        with T.Kernel(1) as _:
            for i in T.Parallel(64):
                Y[i] = T.cast(X[i] * 100.0, "float8_e4m3fn", saturate=True)

    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    y = np.zeros(64, ml_dtypes.float8_e4m3fn)
    _interp(k, x, y)
    scaled = (x * np.float32(100)).astype(np.float32)
    want = np.clip(scaled, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100])
def test_edge_tiles_for_any_size(n):
    from tilepy.kernels import vector_add
    x = np.arange(n, dtype=np.float32)
    assert np.array_equal(_interp(vector_add(32), x, x), 2 * x)


def test_eager_shapes_may_be_expressions_of_sizes():
    @tilepy.jit
    def pairsum(X, block: int = 32):
        N = T.const("N")
        X: T.Tensor((N * 2,), "float32")
        Y = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, block)) as bx:
            for i in T.Parallel(block):
                j = bx * block + i
                if j < N:
                    Y[j] = X[2 * j] + X[2 * j + 1]
        return Y

    x = np.arange(70, dtype=np.float32)
    with tilepy.backend("interp"):
        assert np.array_equal(pairsum(x), x[0::2] + x[1::2])
        with pytest.raises(tilepy.ArgumentError, match=r"N \* 2"):
            pairsum(np.arange(7, dtype=np.float32))


N_SIZE = T.symbolic("N")


@T.prim_func
def interleave(X: T.Tensor((N_SIZE * 2,), "float32"), Y: T.Tensor((N_SIZE,), "float32")):
    with T.Kernel(T.ceildiv(N_SIZE, 16)) as bx:
        for i in T.Parallel(16):
            j = bx * 16 + i
            if j < N_SIZE:
                Y[j] = X[2 * j] - X[2 * j + 1]


def test_arithmetic_on_symbolic_sizes_in_annotations():
    x = np.arange(42, dtype=np.float32) ** 2
    y = np.zeros(21, np.float32)
    _interp(interleave, x, y)
    assert np.array_equal(y, x[0::2] - x[1::2])


def test_annotated_scalar_is_a_variable_and_branch_local_names_work():
    @T.prim_func
    def k(X: T.Tensor((8,), "float32"), Y: T.Tensor((3,), "float32")):
        with T.Kernel(1) as _:
            s: T.float32 = 0.0  # TileLang's form of T.alloc_var("float32", init=0.0)
            n: T.int32 = 0
            for i in T.serial(8):
                s = s + X[i]
                if X[i] > 0:
                    n += 1
            v = X[0]
            if v < 0:
                v = -v  # rebinding inside the branch, read only there
                Y[2] = v
            Y[0] = s
            Y[1] = n

    x = np.array([-3, 1, 2, -1, 5, 0.5, -2, 4], np.float32)
    y = np.zeros(3, np.float32)
    _interp(k, x, y)
    assert y.tolist() == [float(x.sum()), 5.0, 3.0]
