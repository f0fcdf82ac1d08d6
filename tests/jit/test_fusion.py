"""jit/passes/fusion.py: row fusion gives the unfused statements' bits, and runs only where it may.

Exact mode with `fuse=True` must equal the interpreter bit for bit: on rows inside the
arrays (the fused form), on edge tiles and ragged rows (the unfused statements emitted
next to it), and on arrays that overlap (in place, or shifted by a row), where the fused
form would read rows already written. Kernels here vary data, not programs: each program
compiles once (about 2 s) and runs many sizes.
"""

import numpy as np
import pytest

import tilepy
import tilepy.jit as jit
import tilepy.language as T
from tests.jit.oracle import assert_same_bits
from tilepy.interpreter import run as interp_run
from tilepy.ir.stmt import For, Launch, Reduce, Store
from tilepy.jit.passes import fusion
from tilepy.kernels import checks, layernorm, softmax

F = "float32"


def _arrays(name: str, rng, M: int, N: int) -> dict:
    out = {"X": rng.standard_normal((M, N)).astype(np.float32),
           "Y": np.zeros((M, N), np.float32)}
    if name == "layernorm":
        out["gamma"] = rng.standard_normal(N).astype(np.float32)
        out["beta"] = rng.standard_normal(N).astype(np.float32)
    return out


def _agree(func, arrays: dict, sizes: dict, out: str = "Y") -> None:
    a = {k: v.copy() for k, v in arrays.items()}
    b = {k: v.copy() for k, v in arrays.items()}
    interp_run(func, a, sizes)
    jit.run(func, b, sizes, fuse=True)
    assert_same_bits(a[out], b[out], f"{func.name} {sizes}")


def _runs(func) -> list:
    """The fused runs of a kernel's launch, in program order."""
    launch = next(s for s in func.body if isinstance(s, Launch))
    return sorted(fusion.plan(launch).values(), key=lambda r: r.loop.loc.line)


def _run(func):
    """The first fused run (the one-tile path of the library kernels)."""
    return _runs(func)[0]


def _stores(loop: For) -> set:
    out = set()
    for s in loop.body:
        if isinstance(s, For):
            out |= _stores(s)
        elif isinstance(s, Store):
            out.add(s.buffer.name)
    return out


KERNELS = {"layernorm": lambda: layernorm(block_M=4, block_N=64),
           "softmax": lambda: softmax(block_M=4, block_N=64)}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_library_kernels_fused_keep_the_interpreters_bits(name):
    func = KERNELS[name]().func
    assert "the fusion pass" in jit.compile(func, fuse=True).source
    rng = np.random.default_rng(3)
    # inside (4x64 and 12x64), a last block past M, ragged rows (N < 64: the masks and
    # selects do not hold for every column), rows longer than a tile (the chunked path)
    for M, N in ((4, 64), (12, 64), (13, 64), (1, 64), (13, 50), (5, 1), (9, 130)):
        _agree(func, _arrays(name, rng, M, N), {"M": M, "N": N})


def test_layernorm_fused_reads_x_three_times_and_writes_no_tile():
    """The fused layernorm: three element loops over a row of X (sum, squared deviations,
    normalise into Y); the row tiles x and sq are never written."""
    run = _run(layernorm(block_M=4, block_N=64).func)
    loops = [s for s in run.loop.body if isinstance(s, For)]
    assert len(loops) == 3
    assert not _stores(run.loop) & {"x", "sq"}
    assert not run.hoisted  # gamma and beta are read where they lie, g and b not filled
    last = [s for s in run.loop.body if isinstance(s, For)][-1]
    assert {"gamma", "beta", "X"} <= {ld.buffer.name for st in last.body
                                      for ld in fusion._stmt_loads(st)}
    assert len(run.full) == 1 and not run.empty  # the j < N select


def test_softmax_fused_takes_the_row_max_from_x_and_writes_y_once():
    run = _run(softmax(block_M=4, block_N=64).func)
    body = run.loop.body
    red = [s for s in body if isinstance(s, Reduce)]
    assert len(red) == 1 and red[0].src.buffer.name == "X"  # the global row itself
    assert len(run.empty) == 1  # the j >= N mask
    # exp(x - max) goes to Y's row, not to x (fusion.py `_store_in_dest`); the division
    # reads it there and writes Y again
    loops = [s for s in body if isinstance(s, For)]
    assert [sorted(_stores(lp) - {b.name for b in _accs(lp)}) for lp in loops] == [["Y"], ["Y"]]


def _accs(loop: For):
    return {s.buffer for s in loop.body if isinstance(s, Store) and s.buffer.ndim == 0}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_overlapping_arrays_take_the_unfused_statements(name):
    """In place (X is Y) and shifted by one row in one block: the fused form would read
    rows another row's write changed; `_apart` sends both to the unfused statements."""
    func = KERNELS[name]().func
    rng = np.random.default_rng(4)
    for M, base_rows, x_rows, y_rows in ((12, 12, (0, 12), (0, 12)),
                                         (4, 5, (0, 4), (1, 5)), (4, 5, (1, 5), (0, 4))):
        base = rng.standard_normal((base_rows, 64)).astype(np.float32)
        extra = {k: v for k, v in _arrays(name, rng, M, 64).items() if k not in "XY"}
        results = []
        for backend in ("interp", "jit"):
            mem = base.copy()
            arrays = {"X": mem[slice(*x_rows)], "Y": mem[slice(*y_rows)],
                      **{k: v.copy() for k, v in extra.items()}}
            if backend == "interp":
                interp_run(func, arrays, {"M": M, "N": 64})
            else:
                jit.run(func, arrays, {"M": M, "N": 64}, fuse=True)
            results.append(mem)
        assert_same_bits(results[0], results[1], f"{name} rows {x_rows} -> {y_rows}")


@tilepy.jit(out_idx=[-1])
def _rows_kernel(live: bool, reverse: bool, late_copy: bool):
    """Row statements that must keep some of their stores: x changed by a loop that is
    not element-wise (reversed columns) before it is read again, y read after the run
    (a column sum, which is not row by row), a copy into g after a loop that reads g."""
    M, N, B = T.symbolic("M"), T.symbolic("N"), T.symbolic("B")

    @T.prim_func
    def rows(X: T.Tensor((M, N), F), W: T.Tensor((N,), F), Y: T.Tensor((M, N), F),
             S: T.Tensor((M,), F), C: T.Tensor((B, N), F)):
        with T.Kernel(T.ceildiv(M, 4)) as bx:
            x = T.alloc_fragment((4, 32), F)
            y = T.alloc_fragment((4, 32), F)
            g = T.alloc_fragment((32,), F)
            s = T.alloc_fragment((4,), F)
            col = T.alloc_fragment((32,), F)
            T.fill(g, 1.0)
            T.copy(X[bx * 4, 0], x)
            for i, j in T.Parallel(4, 32):
                y[i, j] = x[i, j] * g[j]
            if late_copy:
                T.copy(W[0], g)
            if reverse:
                for i, j in T.Parallel(4, 32):
                    x[i, j] = y[i, 31 - j]
            else:
                for i, j in T.Parallel(4, 32):
                    x[i, j] = y[i, j] + x[i, j]
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(4, 32):
                y[i, j] = x[i, j] * g[j] + s[i]
            T.copy(y, Y[bx * 4, 0])
            T.copy(s, S[bx * 4])
            if live:
                T.reduce_sum(y, col, dim=0)
                T.copy(col, C[bx, 0])

    return rows


@pytest.mark.parametrize("live, reverse, late_copy", [(False, False, False),
                                                      (True, False, False),
                                                      (False, True, False),
                                                      (False, False, True)])
def test_rows_that_must_keep_stores_keep_the_interpreters_bits(live, reverse, late_copy):
    func = _rows_kernel(live, reverse, late_copy).func
    rng = np.random.default_rng(5)
    for M, N in ((4, 32), (8, 32), (6, 32), (8, 20)):
        arrays = {"X": rng.standard_normal((M, N)).astype(np.float32),
                  "W": rng.standard_normal(N).astype(np.float32),
                  "Y": np.zeros((M, N), np.float32), "S": np.zeros(M, np.float32),
                  "C": np.zeros(((M + 3) // 4, N), np.float32)}
        for out in ("Y", "S", "C"):
            _agree(func, arrays, {"M": M, "N": N, "B": (M + 3) // 4}, out)


def test_the_plan_keeps_what_later_statements_read():
    """y is read after the run (live): its stores stay, where otherwise every read of y
    is in the loop that stored it; a loop that is not element-wise does not merge."""
    plain = _run(_rows_kernel(False, False, False).func)
    assert "y" not in _stores(plain.loop)
    live = _run(_rows_kernel(True, False, False).func)
    assert "y" in _stores(live.loop)
    loops = [s for s in plain.loop.body if isinstance(s, For)]
    rev = _run(_rows_kernel(False, True, False).func)
    rev_loops = [s for s in rev.loop.body if isinstance(s, For)]
    assert len(rev_loops) == len(loops) + 2  # the reversal merges with neither side
    # it rewrites all of x before anything reads x again: the copy's x is not stored
    assert _stores(rev_loops[0]) == {"y"} and _stores(rev_loops[1]) == {"x"}
    late = _rows_kernel(False, False, True).func
    launch = next(s for s in late.body if isinstance(s, Launch))
    assert all(not any(type(h).__name__ == "Copy" and h.dst.buffer.name == "g"
                       for h in r.hoisted) for r in fusion.plan(launch).values())


@pytest.mark.parametrize("name, case", [("layernorm", checks.layernorm_case),
                                        ("softmax", checks.softmax_case)])
def test_fast_mode_fused_kernels_stay_within_the_bound(name, case):
    """Fast mode fuses by default (numba tier, fast-math): rows inside the arrays and
    ragged ones both pass the kernels' derived bounds."""
    kernel = KERNELS[name]()
    assert "the fusion pass" in jit.compile(kernel.func, fast=True).source
    rng = np.random.default_rng(6)
    for M, N in ((16, 64), (13, 64), (13, 50)):
        c = case(rng, M, N, block_N=64) if name == "softmax" else case(rng, M, N)
        with tilepy.backend("jit", fast=True):
            got = kernel(*c.inputs)
        assert c.passes(got), (name, M, N)


@tilepy.jit(out_idx=[-1])
def _masked(kind: str):
    """A row mask and a select on their own size L (not the arrays' width): the fused form
    drops the mask and takes the select's first value, so it must run only when L leaves
    every column in (select) or none masked (mask)."""
    M, N, L = T.symbolic("M"), T.symbolic("N"), T.symbolic("L")

    @T.prim_func
    def masked(X: T.Tensor((M, N), F), Y: T.Tensor((M, N), F)):
        with T.Kernel(T.ceildiv(M, 4)) as bx:
            x = T.alloc_fragment((4, 32), F)
            m = T.alloc_fragment((4,), F)
            T.copy(X[bx * 4, 0], x)
            if kind == "mask":
                for i, j in T.Parallel(4, 32):
                    if j >= L:
                        x[i, j] = -T.infinity(F)
            elif kind == "select":
                for i, j in T.Parallel(4, 32):
                    x[i, j] = T.if_then_else(j < L, x[i, j] * 2.0, -1.0)
            else:  # a select on a let of the loop body: not foldable once per block
                for i, j in T.Parallel(4, 32):
                    lim = L - 1
                    x[i, j] = T.if_then_else(j <= lim, x[i, j] * 2.0, -1.0)
            T.reduce_max(x, m, dim=1)
            for i, j in T.Parallel(4, 32):
                x[i, j] = x[i, j] - m[i]
            T.copy(x, Y[bx * 4, 0])

    return masked


@pytest.mark.parametrize("kind", ["mask", "select", "select on a let"])
def test_masks_on_their_own_size_keep_the_interpreters_bits(kind):
    func = _masked(kind).func
    run = _run(func)
    assert (len(run.empty), len(run.full)) == {"mask": (1, 0), "select": (0, 1),
                                               "select on a let": (0, 0)}[kind]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    for L in (0, 5, 31, 32, 40):
        _agree(func, {"X": x, "Y": np.zeros((8, 32), np.float32)}, {"M": 8, "N": 32, "L": L})


@tilepy.jit(out_idx=[-1])
def _carried():
    """A run inside a serial loop: `acc` is read again only by the next iteration (its
    stores must stay), `t` is copied anew each iteration (its store goes)."""
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def carried(X: T.Tensor((M, N), F), S: T.Tensor((M,), F)):
        with T.Kernel(T.ceildiv(M, 4)) as bx:
            t = T.alloc_fragment((4, 32), F)
            acc = T.alloc_fragment((4, 32), F)
            s = T.alloc_fragment((4,), F)
            T.clear(acc)
            T.clear(s)
            for k in T.serial(T.ceildiv(N, 32)):
                T.copy(X[bx * 4, k * 32], t)
                for i, j in T.Parallel(4, 32):
                    acc[i, j] = acc[i, j] * 0.5 + t[i, j]
                T.reduce_sum(acc, s, dim=1, clear=False)
            T.copy(s, S[bx * 4])

    return carried


def test_runs_in_loops_keep_what_the_next_iteration_reads():
    func = _carried().func
    runs = _runs(func)
    assert len(runs) == 1
    stores = _stores(runs[0].loop)
    assert "acc" in stores and "t" not in stores
    rng = np.random.default_rng(8)
    for M, N in ((4, 32), (8, 96), (6, 96), (8, 50)):
        arrays = {"X": rng.standard_normal((M, N)).astype(np.float32),
                  "S": np.zeros(M, np.float32)}
        _agree(func, arrays, {"M": M, "N": N}, "S")


def test_library_kernels_fuse_their_chunked_loops():
    """Rows longer than a tile: layernorm's three chunk loops each become a fused run
    that writes no tile (x is copied anew at the next chunk)."""
    runs = _runs(layernorm(block_M=4, block_N=64).func)
    assert len(runs) == 4  # the one-tile path, then the three chunk loops
    for r in runs[1:]:
        assert not _stores(r.loop) & {"x", "sq"}


@tilepy.jit(out_idx=[-1])
def _weighted(live: bool):
    """A weight vector (L long: past its end the copy gives zeros) copied into g before
    the row loop; g read after the run or not."""
    M, N, B, L = T.symbolic("M"), T.symbolic("N"), T.symbolic("B"), T.symbolic("L")

    @T.prim_func
    def weighted(X: T.Tensor((M, N), F), W: T.Tensor((L,), F), G: T.Tensor((B, 32), F),
                 Y: T.Tensor((M, N), F)):
        with T.Kernel(T.ceildiv(M, 4)) as bx:
            x = T.alloc_fragment((4, 32), F)
            g = T.alloc_fragment((32,), F)
            T.copy(X[bx * 4, 0], x)
            T.copy(W[0], g)
            for i, j in T.Parallel(4, 32):
                x[i, j] = x[i, j] * g[j]
            T.copy(x, Y[bx * 4, 0])
            if live:
                T.copy(g, G[bx, 0])

    return weighted


@pytest.mark.parametrize("live", [False, True])
def test_a_vector_copy_is_read_in_place_unless_read_later(live):
    func = _weighted(live).func
    run = _run(func)
    assert len(run.hoisted) == int(live)  # the copy into g stays only for the later read
    rng = np.random.default_rng(9)
    for M, N, L in ((8, 32, 32), (6, 32, 40), (8, 20, 32), (8, 32, 20)):
        arrays = {"X": rng.standard_normal((M, N)).astype(np.float32),
                  "W": rng.standard_normal(L).astype(np.float32),
                  "G": np.zeros(((M + 3) // 4, 32), np.float32),
                  "Y": np.zeros((M, N), np.float32)}
        for out in ("Y", "G"):
            _agree(func, arrays, {"M": M, "N": N, "B": (M + 3) // 4, "L": L}, out)


def test_the_fused_source_does_not_depend_on_what_was_lowered_before():
    """Fresh names restart with each plan: a kernel's source, hence its disk-cache entry,
    is the same in every process whatever it compiled first."""
    from tilepy.jit.lower import lower

    func = KERNELS["layernorm"]().func
    first = lower(func, fast=True).source
    lower(KERNELS["softmax"]().func, fast=True)
    assert "fuse_r" in first and lower(func, fast=True).source == first



@tilepy.jit(out_idx=[-1])
def _direct():
    """A T.Parallel loop that reads a global itself (the next row of X): no run takes it,
    as the fused form checks global bounds only for the copies' regions."""
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def direct(X: T.Tensor((M, N), F), Y: T.Tensor((M, N), F)):
        with T.Kernel(T.ceildiv(M, 4)) as bx:
            x = T.alloc_fragment((4, 32), F)
            T.copy(X[bx * 4, 0], x)
            for i, j in T.Parallel(4, 32):
                x[i, j] = x[i, j] * 2.0
            for i, j in T.Parallel(4, 32):
                x[i, j] = x[i, j] + X[T.min(bx * 4 + i + 1, M - 1), j]
            T.copy(x, Y[bx * 4, 0])

    return direct


def test_a_loop_reading_a_global_itself_is_not_fused():
    func = _direct().func
    launch = next(s for s in func.body if isinstance(s, Launch))
    runs = list(fusion.plan(launch).values())
    loop = next(k for k, s in enumerate(launch.body)
                if isinstance(s, For) and "X" in str(s))  # the loop reading X itself
    assert runs and all(not r.start <= loop < r.stop for r in runs)
    rng = np.random.default_rng(10)
    for M in (4, 6, 8):
        x = rng.standard_normal((M, 32)).astype(np.float32)
        _agree(func, {"X": x, "Y": np.zeros((M, 32), np.float32)}, {"M": M, "N": 32})


@T.prim_func
def _fill_from_the_run(X: T.Tensor((T.symbolic("M"), 32), F),
                       Y: T.Tensor((T.symbolic("M"), 32), F)):
    """A fill between the run's statements whose value reads the run's reduce."""
    with T.Kernel(T.ceildiv(X.shape[0], 4)) as bx:
        x = T.alloc_fragment((4, 32), F)
        y = T.alloc_fragment((4, 32), F)
        s = T.alloc_fragment((4,), F)
        g = T.alloc_fragment((32,), F)
        T.copy(X[bx * 4, 0], x)
        T.reduce_max(x, s, dim=1)
        T.fill(g, s[0])
        for i, j in T.Parallel(4, 32):
            y[i, j] = x[i, j] - s[i] + g[j]
        T.copy(y, Y[bx * 4, 0])


def test_a_fill_reading_what_the_run_writes_is_not_moved_before_it():
    """Fusion may run a copy or fill of a run first; not one whose value reads a buffer
    the run writes (here the row max): it would read it before the reduce wrote it."""
    rng = np.random.default_rng(3)
    for M in (8, 6):
        X = rng.standard_normal((M, 32)).astype(np.float32)
        _agree(_fill_from_the_run.func, {"X": X, "Y": np.zeros_like(X)}, {"M": M})
