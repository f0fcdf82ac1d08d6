"""Thread-level (SIMT) kernels: thread indices, per-thread storage, barriers (explicit and
TileLang's implicit ones), races in thread order, warp shuffles and thread allreduce, on the
interpreter with hand-computed values; one kernel's bits on the JIT."""

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import TileSyntaxError, TileTypeError


def interp(kernel, *args):
    with tilepy.backend("interp"):
        return kernel(*args)


@tilepy.jit(out_idx=[-1])
def neighbours(n=8, sync=True):
    @T.prim_func
    def main(A: T.Tensor((2, n), "float32"), B: T.Tensor((2, n), "float32")):
        with T.Kernel(2, threads=n) as bx:
            tx = T.get_thread_binding(0)
            s = T.alloc_shared((n,), "float32")
            r = T.alloc_local((1,), "float32")
            s[tx] = A[bx, tx] * 2.0
            if sync:
                T.sync_threads()
            r[0] = s[(tx + 1) % n]  # another thread's element
            B[bx, tx] = r[0] + tx
    return main


def test_thread_index_local_storage_and_barrier():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    want = np.roll(a * 2, -1, axis=1) + np.arange(8)
    np.testing.assert_array_equal(interp(neighbours(), a), want)
    # no T.sync_threads(): TileLang inserts the barrier itself (shared memory read after
    # other threads wrote it), and so does tilepy
    np.testing.assert_array_equal(interp(neighbours(sync=False), a), want)
    # each phase writes shared/global memory only at the thread's own index and reads
    # nothing it writes: the threads are independent, so the phase is a T.Parallel loop
    text = str(neighbours().ir)
    assert "for t in T.Parallel(8)" in text and "for t_1 in T.Parallel(8)" in text


@tilepy.jit(out_idx=[-1])
def coords(threads=(4, 2, 3)):
    @T.prim_func
    def main(Y: T.Tensor((3, 2, 4), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            ty = T.thread_binding(0, 2, thread="threadIdx.y")
            tz = T.get_thread_binding(2)
            Y[tz, ty, tx] = tz * 100 + ty * 10 + tx + T.get_lane_idx() * 1000
    return main


@pytest.mark.parametrize("threads", [(4, 2, 3), [4, 2, 3]])
def test_thread_shapes_as_tuple_or_list(threads):
    y = interp(coords(threads))
    z, yy, x = np.meshgrid(range(3), range(2), range(4), indexing="ij")
    lin = x + 4 * (yy + 2 * z)
    np.testing.assert_array_equal(y, z * 100 + yy * 10 + x + (lin % 32) * 1000)


def test_thread_binding_range_must_match_the_launch():
    with pytest.raises(TileTypeError, match="threadIdx.x has 128 threads"):
        @T.prim_func
        def bad(Y: T.Tensor((2,), "int32")):
            with T.Kernel(1):
                t = T.thread_binding(0, 2, thread="threadIdx.x")
                Y[t] = 1


@tilepy.jit(out_idx=[-1])
def races(n=6):
    @T.prim_func
    def main(Y: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding(0)
            s = T.alloc_shared((1,), "int32")
            v = T.alloc_var("int32")  # per thread, as TileLang's local.var
            v = tx * 3
            s[0] = tx  # every thread writes: the last thread's value stays
            Y[0] = tx  # a race on global memory: the same rule
            T.sync_threads()
            Y[1] = s[0]
            T.fill(s, 7)  # a tile op on per-block data runs once for the block
            T.atomic_add(s[0], 1)
            T.sync_threads()
            Y[2] = s[0]
            Y[3] = v
    return main


def test_races_give_the_last_threads_value_and_tile_ops_run_once():
    assert interp(races()).tolist() == [5, 5, 7 + 6, 15]
    assert "for t in T.serial(6)" in str(races().ir)  # threads that race run in order


def test_divergent_barrier_is_an_error_at_its_line():
    with pytest.raises(TileSyntaxError) as e:
        @T.prim_func
        def bad(Y: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=8):
                tx = T.get_thread_binding(0)
                if tx < 4:
                    T.sync_threads()
                Y[tx] = 1
    line = bad_line = e.value.loc.line
    first = test_divergent_barrier_is_an_error_at_its_line.__code__.co_firstlineno
    assert bad_line == first + 7 and e.value.loc.file == __file__
    msg = str(e.value)
    assert f"inside the if at line {line - 1}, whose condition depends on the thread" in msg
    assert "T.sync_threads() is inside" in msg and "undefined" in msg
    with pytest.raises(TileSyntaxError, match=r"T\.shfl_xor is inside the loop at line \d+, "
                                              "whose bounds depend on the thread"):
        @T.prim_func
        def bad2(Y: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                tx = T.get_thread_binding(0)
                for i in T.serial(tx):
                    Y[tx] = T.shfl_xor(Y[tx], i)


def test_barrier_in_uniform_loop_splits_the_loop():
    @T.prim_func
    def scan(X: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=8):
            tx = T.get_thread_binding(0)
            s = T.alloc_shared((8,), "int32")
            v = T.alloc_local((1,), "int32")
            s[tx] = X[tx]
            for i in T.serial(3):  # Hillis-Steele inclusive scan
                T.sync_threads()
                v[0] = s[tx]
                if tx >= (1 << i):
                    v[0] += s[tx - (1 << i)]
                T.sync_threads()
                s[tx] = v[0]
            X[tx] = s[tx]
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    want = np.cumsum(x)
    interp(scan, x)
    np.testing.assert_array_equal(x, want)


@tilepy.jit(out_idx=[-1])
def allreduce(dims=(0,), op="sum", nx=4, ny=3):
    @T.prim_func
    def main(A: T.Tensor((ny, nx), "float32"), B: T.Tensor((ny, nx), "float32")):
        with T.Kernel(1, threads=(nx, ny)):
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            red = T.alloc_local((1,), "float32")
            acc[0] = A[ty, tx]
            if op == "sum":
                fn = T.comm_reducer(lambda x, y: x + y, [T.Cast("float32", 0)])
            else:
                fn = T.comm_reducer(lambda x, y: T.max(x, y), [T.Cast("float32", 0)])
            with T.attr(fn, "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                if dims == (0,):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], tx,
                                                      dtype="handle"))
                elif dims == (1,):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], ty,
                                                      dtype="handle"))
                else:
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], tx,
                                                      ty, dtype="handle"))
            B[ty, tx] = red[0]
    return main


def test_allreduce_over_2d_thread_shapes():
    a = np.array([[1, -2, 3, 4], [5, 6, -7, 8], [0, 10, 11, -12]], np.float32)
    for dims, axis in (((0,), 1), ((1,), 0), ((0, 1), None)):
        b = interp(allreduce(dims, "sum"), a)
        np.testing.assert_array_equal(b, np.broadcast_to(a.sum(axis=axis, keepdims=True),
                                                         a.shape))
        b = interp(allreduce(dims, "max"), a)
        np.testing.assert_array_equal(b, np.broadcast_to(a.max(axis=axis, keepdims=True),
                                                         a.shape))


def test_allreduce_sums_in_ascending_thread_order():
    a = np.array([[1e8, 1.0, -1e8, 1.0]], np.float32)
    b = interp(allreduce((0,), "sum", 4, 1), a)
    seq = np.float32(0)
    seq = ((a[0, 0] + a[0, 1]) + a[0, 2]) + a[0, 3]  # float32 at every step
    assert b[0, 0] == seq == np.float32(1.0)


@tilepy.jit(out_idx=[-1])
def shuffle(kind, arg, width, n=64):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding(0)
            v = A[tx]
            if kind == "xor":
                B[tx] = T.shfl_xor(v, arg, width)
            elif kind == "down":
                B[tx] = T.shfl_down(v, arg, width)
            elif kind == "up":
                B[tx] = T.shfl_up(v, arg, width)
            else:
                B[tx] = T.tvm_warp_shuffle(0xFFFFFFFF, v, tx + arg, width, 32)
    return main


def shuffle_model(a, kind, arg, width):
    """CUDA's __shfl_*_sync per warp of 32 lanes, in groups of `width` lanes."""
    out = a.copy()
    for t in range(len(a)):
        lane, base = t % 32, t - t % 32
        group, pos = lane - lane % width, lane % width
        if kind == "idx":
            src = group + (lane + arg) % width
        elif kind == "xor":
            src = lane ^ arg
            src = src if src < group + width else lane  # later groups: own value
        elif kind == "down":
            src = lane + arg if pos + arg < width else lane
        else:
            src = lane - arg if pos >= arg else lane
        out[t] = a[base + src]
    return out


@pytest.mark.parametrize("kind,arg,width", [
    ("xor", 1, 32), ("xor", 5, 8), ("xor", 16, 16), ("down", 1, 32), ("down", 3, 8),
    ("up", 2, 32), ("up", 5, 16), ("idx", 3, 32), ("idx", 7, 4)])
def test_warp_shuffles_match_cudas_rules(kind, arg, width):
    a = np.arange(64, dtype=np.float32) * 1.5
    np.testing.assert_array_equal(interp(shuffle(kind, arg, width), a),
                                  shuffle_model(a, kind, arg, width))


def test_shuffle_width_must_be_a_power_of_two():
    with pytest.raises(TileTypeError, match="width must be a power of two"):
        shuffle("xor", 1, 12)


@tilepy.jit(out_idx=[-1])
def warp_sum(n=64):
    """Butterfly sum per warp through shuffles, then a block allreduce of the warp sums."""
    @T.prim_func
    def main(A: T.Tensor((4, n), "float32"), B: T.Tensor((4, n), "float32")):
        with T.Kernel(4, threads=n) as bx:
            tx = T.get_thread_binding(0)
            v = T.alloc_local((1,), "float32")
            red = T.alloc_local((1,), "float32")
            v[0] = A[bx, tx]
            for i in T.serial(5):
                v[0] = v[0] + T.shfl_xor(v[0], 16 >> i)
            s = T.alloc_shared((n,), "float32")
            s[tx] = v[0]
            T.sync_threads()
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.Cast("float32", 0)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), s[n - 1 - tx], True, red[0],
                                                  tx, dtype="handle"))
            B[bx, tx] = red[0] - v[0]
    return main


def test_interpreter_and_jit_give_the_same_bits():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((4, 64)) * 10 ** rng.uniform(-3, 3, (4, 64))).astype(np.float32)
    k = warp_sum()
    want = interp(k, a)
    assert np.isfinite(want).all() and len(np.unique(want)) > 4
    with tilepy.backend("jit"):
        got = k(a)
    np.testing.assert_array_equal(want.view(np.uint32), got.view(np.uint32))


def test_kernels_without_thread_indices_keep_the_tile_path():
    @T.prim_func
    def plain(X: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(8):
                X[i] = X[i] + 1.0
    text = str(plain.ir)
    assert "T.Parallel(8)" in text and "T.serial(128)" not in text


@tilepy.jit(out_idx=[-1])
def histogram_select(n=16):
    """Counts in shared memory with read-add atomics, a partial barrier in a branch on the
    thread, a uniform per-thread count bounding a loop with barriers, and a loop break."""
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Y: T.Tensor((n + 4,), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            hist = T.alloc_shared((4,), "int32")
            s = T.alloc_shared((n,), "int32")
            cnt = T.alloc_var("int32")
            T.fill(hist[0], 0)  # one element
            T.fill(hist[1:4], 0)
            T.sync_threads()
            pos = T.atomic_add(hist[X[tx] % 4], 1, return_prev=True)
            s[tx] = pos
            T.sync_threads()
            if tx < 4:  # the first 4 threads scan hist among themselves
                v = T.alloc_var("int32")
                for i in T.serial(2):
                    T.sync_threads(1, 4)
                    v = hist[tx]
                    if tx >= (1 << i):
                        v = v + hist[tx - (1 << i)]
                    T.sync_threads(1, 4)
                    hist[tx] = v
            T.sync_threads()
            cnt = hist[3]  # the same in every thread
            done = T.alloc_var("int32")
            done = 0
            for r in T.serial(cnt):
                if r >= 3:
                    T.loop_break()
                T.sync_threads()
                done = done + 1
            Y[tx] = s[tx]
            if tx < 4:
                Y[n + tx] = hist[tx] * 100 + done
    return main


def test_read_add_atomics_partial_barriers_uniform_counts_and_breaks():
    x = np.array([1, 2, 1, 1, 0, 3, 2, 1, 5, 6, 7, 0, 4, 9, 2, 3], np.int32)
    y = interp(histogram_select(), x)
    key = x % 4
    prev = [int((key[:t] == key[t]).sum()) for t in range(16)]  # threads in order
    np.testing.assert_array_equal(y[:16], prev)
    counts = np.bincount(key, minlength=4)
    np.testing.assert_array_equal(y[16:], np.cumsum(counts) * 100 + 3)  # broke after 3
    with pytest.raises(TileTypeError, match="return_prev=True\\) needs one element of a "
                                            "shared or local buffer"):
        @T.prim_func
        def bad(X: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=4):
                X[0] = T.atomic_add(X[1], 1, return_prev=True)


@pytest.mark.parametrize("make", [neighbours, races, histogram_select, warp_sum,
                                  lambda: allreduce((0, 1), "max")])
def test_thread_level_ir_verifies_and_round_trips(make):
    from tilepy.ir.parser import parse
    from tilepy.ir.printer import format_func
    from tilepy.ir.verify import verify

    func = make().func
    verify(func)
    assert parse(format_func(func)) == func


@tilepy.jit(out_idx=[-2, -1])
def phase_kinds():
    """Every phase runs as T.Parallel: a fill of per-thread storage, stores whose value
    depends on the thread only through the address, a float atomic add in thread order,
    a store at `tx` that only the last threads keep."""
    @T.prim_func
    def main(A: T.Tensor((2, 32), "float32"), B: T.Tensor((2, 4), "float32"),
             C: T.Tensor((2, 4), "float32")):
        with T.Kernel(2, threads=(4, 8)) as bx:
            tx, ty = T.get_thread_binding(0), T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            tot = T.alloc_shared((4,), "float32")
            flag = T.alloc_shared((1,), "int32")
            T.fill(flag, 0)
            T.clear(acc)
            if ty == 0:
                tot[tx] = 0.0
            if A[bx, ty * 4 + tx] > 0:
                flag[0] = 1
            T.sync_threads()
            acc[0] = A[bx, ty * 4 + tx] * 1.5
            T.atomic_add(tot[tx], acc[0])
            T.sync_threads()
            B[bx, tx] = tot[tx] + flag[0]
            C[bx, tx] = acc[0]
    return main


def test_independent_phases_run_as_parallel_loops_with_thread_order_results():
    k = phase_kinds()
    text = str(k.ir)
    assert text.count("T.Parallel(32)") == 3 and "T.serial(32)" not in text
    assert "if t_2 >= 28:" in text  # of the threads writing C[bx, tx], the last ones
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((2, 32)) * 10 ** rng.uniform(-4, 4, (2, 32))).astype(np.float32)
    a[1] = -np.abs(a[1])
    b, c = interp(k, a)
    prod = a.reshape(2, 8, 4) * np.float32(1.5)
    tot = np.zeros((2, 4), np.float32)
    for ty in range(8):  # threads add in ascending order: ty ascending for each tx
        tot = tot + prod[:, ty]
    np.testing.assert_array_equal(b, tot + np.array([[1], [0]], np.float32))
    np.testing.assert_array_equal(c, prod[:, 7])
    with tilepy.backend("jit"):
        jb, jc = k(a)
    np.testing.assert_array_equal(b.view(np.uint32), jb.view(np.uint32))
    np.testing.assert_array_equal(c.view(np.uint32), jc.view(np.uint32))


def test_stores_of_one_buffer_at_the_thread_in_different_positions_stay_serial():
    @T.prim_func
    def crossed(G: T.Tensor((4, 4), "int32")):
        with T.Kernel(1, threads=4):
            tx = T.get_thread_binding(0)
            G[tx, 0] = 10 + tx
            G[1, tx] = 20 + tx
    g = np.zeros((4, 4), np.int32)
    with tilepy.backend("interp"):
        crossed(g)
    want = np.zeros((4, 4), np.int32)
    for t in range(4):  # thread by thread: thread 1's first store overwrites G[1, 0]
        want[t, 0], want[1, t] = 10 + t, 20 + t
    np.testing.assert_array_equal(g, want)
    assert "T.serial(4)" in str(crossed.ir)


@tilepy.jit(out_idx=[-1])
def votes(mask=0xFFFFFFFF, n=80):
    """Every vote of every thread, with a per-lane mask or the given one."""
    @T.prim_func
    def main(P: T.Tensor((n,), "int32"), M: T.Tensor((n,), "int64"),
             V: T.Tensor((7, n), "int64")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding(0)
            p = P[tx] > 0
            m = M[tx] if mask is None else mask
            V[0, tx] = T.any_sync(p, m)
            V[1, tx] = T.all_sync(p, m)
            V[2, tx] = T.ballot_sync(p, m)
            V[3, tx] = T.ballot(p)
            V[4, tx] = T.activemask()
            V[5, tx] = T.syncthreads_count(p)
            V[6, tx] = T.syncthreads_and(p) * 2 + T.syncthreads_or(p)
    return main


def votes_model(p, masks):
    """CUDA's __any_sync / __all_sync / __ballot_sync / __activemask per warp of 32 lanes
    (lanes past the block's last thread do not exist), and __syncthreads_count/and/or."""
    n = len(p)
    out = np.zeros((7, n), np.int64)
    for t in range(n):
        base = t - t % 32
        lanes = [base + k for k in range(32) if base + k < n]
        named = [u for u in lanes if masks[t] >> (u - base) & 1]
        bits = sum(1 << (u - base) for u in named if p[u])
        out[0, t], out[1, t] = bits != 0, all(p[u] for u in named)
        out[2, t] = bits
        out[3, t] = sum(1 << (u - base) for u in lanes if p[u])
        out[4, t] = (1 << len(lanes)) - 1
        out[5, t] = np.count_nonzero(p)
        out[6, t] = 2 * bool(p.all()) + bool(p.any())
    return out


@pytest.mark.parametrize("mask", [0xFFFFFFFF, 0x0000FFFF, None])
def test_warp_and_block_votes_match_cudas_rules(mask):
    rng = np.random.default_rng(7)
    p = (rng.random(80) < 0.6).astype(np.int32)
    p[32:64] = 1  # a warp where all hold; the last warp has 16 lanes
    masks = rng.integers(0, 2 ** 32, 80, dtype=np.int64) if mask is None else np.full(
        80, mask, np.int64)
    got = interp(votes(mask), p, masks)
    np.testing.assert_array_equal(got, votes_model(p, masks))
    assert got[1, 40] == 1 and got[1, 0] == 0 and got[4, 79] == 0xFFFF
    if mask is None:  # one kernel's bits on the JIT
        with tilepy.backend("jit"):
            np.testing.assert_array_equal(votes(mask)(p, masks), got)


def test_a_vote_under_a_branch_on_the_thread_is_an_error():
    with pytest.raises(TileSyntaxError, match="T.any_sync is inside the if"):
        @T.prim_func
        def bad(P: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding(0)
                if tx < 32:
                    P[tx] = T.any_sync(P[tx] > 0)


@tilepy.jit(out_idx=[-1])
def rows_in_a_while(n=16, rows=4):
    @T.prim_func
    def main(X: T.Tensor((rows, n), "float32"), Y: T.Tensor((rows, n), "float32")):
        with T.Kernel(2, threads=n) as b:
            tx = T.get_thread_binding()
            s = T.alloc_shared((n,), "float32")
            r = T.alloc_var("int32")
            r = b
            with T.While(r < rows):
                cur = r
                row = cur * 1  # a name bound from another, used by tile ops below
                T.copy(X[row, :], s)
                T.sync_threads()
                s[tx] = s[tx] * 2.0 + row
                T.sync_threads()
                for j in T.Parallel(n):
                    Y[row, j] = s[j] + row
                r = r + 2
    return main


def test_a_let_in_a_while_body_used_by_tile_ops_around_barriers():
    # the tile ops run once for the block, outside the threads' loops: `row` was bound
    # inside a thread loop and reported "used but not bound" there
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    want = x * 2 + 2 * np.arange(4, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(interp(rows_in_a_while(), x), want)
def test_strided_per_thread_elements_run_as_parallel_and_overlapping_ones_stay_serial():
    @T.prim_func
    def strided(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=4) as bx:
            tx = T.get_thread_binding(0)
            S = T.alloc_shared((2, 32), "float32")
            for r in T.unroll(2):  # each thread owns S[:, tx * 8 : tx * 8 + 8]
                for i in T.serial(8):
                    S[r, tx * 8 + i] = X[bx * 32 + tx * 8 + i] * (r + 1)
            for i in T.serial(8):
                Y[(bx * 4 + tx) * 8 + i] = S[1, tx * 8 + i] - S[0, tx * 8 + i] * 0.5

    @T.prim_func
    def chained(G: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=3):
            tx = T.get_thread_binding(0)
            for i in T.serial(8):  # thread tx reads what thread tx - 1 wrote
                G[tx * 8 + i + 8] = G[tx * 8 + i] * 2.0 + 1.0

    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    with tilepy.backend("interp"):
        strided(x, y)
    np.testing.assert_array_equal(y, x * 2 - x * np.float32(0.5))
    assert "T.Parallel(4)" in str(strided.ir) and "T.serial(4)" not in str(strided.ir)
    g = np.ones(32, np.float32)
    with tilepy.backend("interp"):
        chained(g)
    want = np.ones(32, np.float32)
    for t in range(3):  # thread by thread
        want[t * 8 + 8:t * 8 + 16] = want[t * 8:t * 8 + 8] * 2 + 1
    np.testing.assert_array_equal(g, want)
    assert "T.serial(3)" in str(chained.ir)
