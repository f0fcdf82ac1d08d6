"""Calling kernels, the same on every backend (interpreter, JIT, the JIT's `py` tier): the
argument checks they share (array kinds, read-only arrays, sizes past int32), block, tile
and grid sizes (tilepy/limits.py), zero-size dimensions and regions outside global
buffers (TileLang's safe-memory-access rule: loads give 0, stores are skipped).

The JIT kernels here are small and reused across cases; their compiles are the cost."""

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import ArgumentError, SizeError
from tilepy.kernels.gemm import gemm

BACKENDS = ["interp", "jit", "py"]
HERE = __file__


def _line(text: str) -> int:
    """The line of this file that holds `text` (a kernel's line under test)."""
    with open(HERE) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


@tilepy.jit(out_idx=[-1])
def scale2(bm=4, bn=8):
    """Y = 2 X through a (bm, bn) tile per block."""
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def scale2(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):  # scale2 grid
            t = T.alloc_fragment((bm, bn), "float32")  # scale2 tile
            T.copy(X[by * bm, bx * bn], t)
            for i, j in T.Parallel(bm, bn):
                t[i, j] = t[i, j] * 2.0
            T.copy(t, Y[by * bm, bx * bn])

    return scale2


@tilepy.jit(out_idx=[-1])
def rowsum(bm=4, bn=8):
    """Y[i] = sum of X[i, :bn]: the tile starts at column 0 even when N is 0."""
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def rowsum(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            t = T.alloc_fragment((bm, bn), "float32")
            s = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], t)
            T.reduce_sum(t, s, dim=1)
            T.copy(s, Y[bx * bm])

    return rowsum


def _run(backend, kernel, *args):
    with tilepy.backend(backend):
        return kernel(*args)


# ------------------------------------------------------------------ block and grid sizes


@pytest.mark.parametrize("bm", [0, -4])
def test_block_size_of_zero_or_below_is_refused_when_the_kernel_is_built(bm):
    with pytest.raises(SizeError) as info:
        scale2(bm=bm)
    e = info.value
    assert e.loc.file == HERE and e.loc.line == _line("# scale2 grid")
    assert f"divides by {bm}" in e.message and "at least 1" in e.message
    assert "T.Kernel(T.ceildiv(N, bn)" in str(e)  # the user's line is shown


def test_tile_dimension_below_one_names_the_buffer_and_its_line():
    n = T.symbolic("n")
    with pytest.raises(SizeError) as info:

        @T.prim_func
        def neg(X: T.Tensor((n,), "float32")):
            with T.Kernel(1) as _:
                t = T.alloc_fragment((4, -2), "float32")  # neg tile
                T.fill(t, 1.0)

    assert info.value.loc.line == _line("# neg tile")
    assert "t has shape (4, -2)" in info.value.message and "got -2 in dimension 1" in \
        info.value.message


n_, m_ = T.symbolic("n"), T.symbolic("m")


@T.prim_func
def by_m(X: T.Tensor((n_,), "float32"), B: T.Tensor((m_,), "float32"),
         Y: T.Tensor((n_,), "float32")):
    with T.Kernel(T.ceildiv(n_, m_)) as bx:  # by_m grid
        t = T.alloc_fragment((4,), "float32")
        T.copy(X[bx * 4], t)
        T.copy(t, Y[bx * 4])


@T.prim_func
def minus8(X: T.Tensor((n_,), "float32"), Y: T.Tensor((n_,), "float32")):
    with T.Kernel(n_ - 8) as bx:  # minus8 grid
        t = T.alloc_fragment((4,), "float32")
        T.copy(X[bx * 4], t)
        T.copy(t, Y[bx * 4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_grid_extents_are_checked_at_the_call(backend):
    k, k8 = tilepy.compile(by_m, out_idx=[-1]), tilepy.compile(minus8, out_idx=[-1])
    with pytest.raises(SizeError) as info:  # T.ceildiv(n, m) with m = 0: no block size
        _run(backend, k, np.ones(16, np.float32), np.ones(0, np.float32))
    assert info.value.loc.line == _line("# by_m grid") and "divides by m = 0" in \
        info.value.message
    with pytest.raises(SizeError) as info:
        _run(backend, k8, np.ones(4, np.float32))
    assert info.value.loc.line == _line("# minus8 grid")
    assert "is -4 (with n = 4): expected at least 0" in info.value.message
    x = np.arange(16, dtype=np.float32)  # 4 blocks of 4
    np.testing.assert_array_equal(_run(backend, k, x, np.ones(4, np.float32)), x)
    empty = _run(backend, k, np.ones(0, np.float32), np.ones(4, np.float32))
    assert empty.shape == (0,)  # a grid of 0 blocks from an empty input is legal


def test_block_local_buffers_larger_than_memory_are_refused_when_built(monkeypatch):
    n = T.symbolic("n")

    def build(shape):
        @T.prim_func
        def huge(X: T.Tensor((n,), "float32")):
            with T.Kernel(1) as _:
                a = T.alloc_fragment((1024,), "float32")  # 4 KiB
                t = T.alloc_shared(shape, "float32")  # huge tile
                T.fill(a, 0.0)
                T.fill(t, 1.0)

        return huge

    with pytest.raises(SizeError) as info:
        build((1 << 20, 1 << 20))
    e = info.value
    assert e.loc.line == _line("# huge tile")
    assert "t (shared float32, shape (1048576, 1048576)) takes 4398046511104 bytes " \
           "(4.0 TiB): more than this machine's memory" in e.message
    monkeypatch.setattr("tilepy.limits.memory_bytes", lambda: 6000)
    build((8, 8))  # 4 KiB + 256 bytes fit
    with pytest.raises(SizeError, match=r"takes 4096 bytes \(4.0 KiB\), 8192 bytes \(8.0 "
                                        r"KiB\) with the buffers before it"):
        build((32, 32))


# ------------------------------------------------------------------ zero-size dimensions


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (0, 0), (6, 3)])
def test_zero_size_dimensions_agree_on_every_backend(backend, shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    y = _run(backend, scale2(), x)
    assert y.shape == shape
    np.testing.assert_array_equal(y, 2 * x)
    s = _run(backend, rowsum(), x)  # reads a tile at column 0 of N = 0 columns: zeros
    np.testing.assert_array_equal(s, x.sum(axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_with_zero_size_dimensions(backend):
    # C = A^T B^T (tests/jit/test_kernels.py compiles the same kernel)
    k = gemm(32, 48, 16, "float32", "float32", "float32", True, True)
    rng = np.random.default_rng(0)
    for m, n, kk in [(5, 7, 0), (0, 7, 3), (5, 0, 3), (0, 0, 0), (5, 7, 3)]:
        a = rng.standard_normal((kk, m)).astype(np.float32)
        b = rng.standard_normal((n, kk)).astype(np.float32)
        c = _run(backend, k, a, b)
        assert c.shape == (m, n)
        want = np.zeros((m, n), np.float32)  # K = 0: C = 0
        for i in range(kk):  # the contract's order: k ascending, one rounding per op
            want = want + np.outer(a[i], b[:, i])
        np.testing.assert_array_equal(c, want)


@T.prim_func
def shifted(X: T.Tensor((n_,), "float32"), Y: T.Tensor((n_,), "float32")):
    with T.Kernel(2) as bx:
        t = T.alloc_fragment((8,), "float32")
        T.copy(X[bx * 12 - 4], t)  # block 0 starts before X, block 1 past its end
        T.copy(t, Y[bx * 12 - 2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_region_starting_outside_a_global_buffer_reads_zeros_and_drops_writes(backend):
    x = np.arange(1, 9, dtype=np.float32)
    y = _run(backend, tilepy.compile(shifted, out_idx=[-1]), x)
    # block 0: t = [0, 0, 0, 0, 1, 2, 3, 4] -> Y[-2:6]; block 1: t = 0 -> Y[10:18], dropped
    np.testing.assert_array_equal(y, [0, 0, 1, 2, 3, 4, 0, 0])


# ------------------------------------------------------------------ array kinds


@tilepy.jit
def add_one(block=8):
    """X += 1 in place."""
    n = T.symbolic("n")

    @T.prim_func
    def add_one(X: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            t = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], t)
            for i in T.Parallel(block):
                t[i] = t[i] + 1.0
            T.copy(t, X[bx * block])

    return add_one


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_only_inputs_work_and_a_written_read_only_array_is_refused(backend):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    x.flags.writeable = False
    np.testing.assert_array_equal(_run(backend, scale2(), x), 2 * x)
    v = np.zeros(8, np.float32)
    v.flags.writeable = False
    with pytest.raises(ArgumentError) as info:
        _run(backend, add_one(), v)
    e = info.value
    assert e.loc.file == HERE and "argument X is read-only, but the kernel writes it" in \
        e.message


def test_which_parameters_a_kernel_writes_is_found_once(monkeypatch):
    """The read-only check walks the kernel's body once, not at every call (a cost that
    grows with the kernel's size, paid by every call of a large one)."""
    import tilepy.kernel as kernel_module

    walks = []
    real = kernel_module.written_params
    monkeypatch.setattr(kernel_module, "written_params", lambda f: walks.append(f) or real(f))
    k, x = scale2(bm=2, bn=2), np.ones((2, 2), np.float32)
    with tilepy.backend("interp"):
        for _ in range(3):
            np.testing.assert_array_equal(k(x), 2 * x)
    assert len(walks) == 1


def test_an_allreduce_result_feeds_a_jit_kernel(monkeypatch):
    from tilepy.parallel import launch

    monkeypatch.setenv("TILEPY_BACKEND", "jit")  # the ranks' threads see the environment
    k = scale2()

    def step(comm):
        g = comm.allreduce(np.full((3, 4), comm.rank + 1.0, np.float32))  # read-only
        assert not g.flags.writeable
        return k(g)

    for y in launch(step, 2):
        np.testing.assert_array_equal(y, np.full((3, 4), 6.0, np.float32))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_array_likes_work_identically_or_get_a_clear_error(backend, tmp_path):
    k = scale2()
    good = np.arange(12, dtype=np.float32).reshape(3, 4)
    unaligned = np.frombuffer(np.zeros(49, np.uint8).data, np.float32, 12, 1).reshape(3, 4)
    cases = [
        (np.ma.masked_array(good, good > 5), "is a masked array", "x.filled(value)"),
        (np.asmatrix(good), "is an np.matrix", "np.asarray(x)"),
        (good.tolist(), "must be a numpy array; got list", "np.asarray(x)"),
        (good.T, "must be C-contiguous", "np.ascontiguousarray(x)"),
        (good.astype(">f4"), "expected dtype float32; got >f4", "x.astype(np.float32)"),
        (good.astype(object), "expected dtype float32; got object", "x.astype(np.float32)"),
        (unaligned, "must be aligned", "x.copy()"),
    ]
    for arg, message, hint in cases:
        with pytest.raises(ArgumentError) as info:
            _run(backend, k, arg)
        assert message in info.value.message and hint in info.value.hint
        assert info.value.loc.file == HERE
    mm = np.memmap(tmp_path / "x.bin", np.float32, "w+", shape=(3, 4))
    mm[:] = good  # an ndarray subclass: used as the plain array it views
    np.testing.assert_array_equal(_run(backend, k, mm), 2 * good)


# ------------------------------------------------------------------ sizes past int32


@tilepy.jit(out_idx=[-1])
def tail():
    """The last 64 elements of X, read through an index computed from its size."""
    n = T.symbolic("n")

    @T.prim_func
    def tail(X: T.Tensor((n,), "int8"), Y: T.Tensor((64,), "int8")):
        with T.Kernel(1) as _:
            t = T.alloc_fragment((64,), "int8")
            T.copy(X[n - 64], t)
            T.copy(t, Y)

    return tail


L_, M_, N_ = T.symbolic("L", "int64"), T.symbolic("M"), T.symbolic("N")


@T.prim_func
def corners(V: T.Tensor((L_,), "int8"), X: T.Tensor((M_, N_), "int8"),
            Y: T.Tensor((5, 64), "int8")):
    with T.Kernel(1) as _:
        t = T.alloc_fragment((5, 64), "int8")
        T.copy(X[M_ - 4, N_ - 64], t[0:4, 0:64])
        T.copy(V[L_ - 64], t[4, 0:64])
        for i, j in T.Parallel(4, 64):
            t[i, j] = t[i, j] + X[M_ - 1, N_ - 1 - j]
        T.copy(t, Y)


def _sparse(path, shape) -> np.memmap:
    """A file-backed int8 array of `shape` whose pages stay holes until written."""
    with open(path, "wb") as f:
        f.truncate(int(np.prod(shape)))
    return np.memmap(path, np.int8, "r+", shape=shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_arrays_of_more_than_2_31_elements(backend, tmp_path):
    v = _sparse(tmp_path / "v", ((1 << 31) + 100,))
    v[-64:] = np.arange(64, dtype=np.int8)
    with pytest.raises(ArgumentError) as info:  # an int32 size cannot hold the length
        _run(backend, tail(), v)
    assert "has 2147483748 elements in dimension 0, more than the size n (int32) can " \
           "hold" in info.value.message and '"int64"' in info.value.hint
    x = _sparse(tmp_path / "x", (1 << 16, (1 << 15) + 1))  # 2^31 + 2^16 elements
    x[-4:, -64:] = (np.arange(256) - 128).astype(np.int8).reshape(4, 64)
    want = np.concatenate([x[-4:, -64:] + x[-1, ::-1][:64],  # int8: wraps as the kernel's
                           np.arange(64, dtype=np.int8)[None]])
    got = _run(backend, tilepy.compile(corners, out_idx=[-1]), v, x)
    np.testing.assert_array_equal(got, want)


def test_size_expressions_evaluate_as_the_op_table_says():
    """eval_index's int fast path floors like numpy and defers overflow to the op table."""
    import numpy as np

    from tilepy.errors import NOLOC
    from tilepy.frontend import exprs
    from tilepy.ir.expr import Var
    from tilepy.ir.ops import Op, reference
    from tilepy.ir.types import int32
    from tilepy.kernel import eval_index

    n, m = Var("n", int32), Var("m", int32)
    for op in (Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD):
        e = exprs.call(op, [n, m], NOLOC)
        for a, b in ((-7, 4), (7, -4), (2 ** 20, 2 ** 20), (2 ** 31 - 1, 1), (5, 0)):
            want = int(reference(op, [np.asarray(a, np.int64), np.asarray(b, np.int64)],
                                 (int32, int32), int32))
            assert eval_index(e, {"n": a, "m": b}) == want, (op, a, b)
