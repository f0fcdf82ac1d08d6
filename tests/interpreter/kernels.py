"""Kernels the interpreter tests run, written with the front end. Tests locate lines by
their text (`line_of`), so editing this file does not break the error-line contracts."""

import inspect

import tilepy.language as T


def line_of(fn, text: str) -> int:
    """The 1-based line of this file holding `text` inside factory `fn`."""
    lines, start = inspect.getsourcelines(fn)
    for i, ln in enumerate(lines):
        if text in ln:
            return start + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def affine(n, block, dtype, a, b):
    """y = x * a + b per element, blocks of `block`, guarded edge."""

    @T.prim_func
    def k(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < n:
                    Y[idx] = X[idx] * a + b

    return k


def tile_copy(m, n, bm, bn, src_dt, mid_dt, dst_dt):
    """Y = X through a shared tile of mid_dt, 2-d blocks with edge tiles."""

    @T.prim_func
    def k(X: T.Tensor((m, n), src_dt), Y: T.Tensor((m, n), dst_dt)):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm)) as (bx, by):
            S = T.alloc_shared((bm, bn), mid_dt)
            T.copy(X[by * bm, bx * bn], S)
            T.copy(S, Y[by * bm, bx * bn])

    return k


def fill_rows(m, n, bm, dtype, value):
    @T.prim_func
    def k(Y: T.Tensor((m, n), dtype)):
        with T.Kernel(T.ceildiv(m, bm)) as bx:
            F = T.alloc_fragment((bm, n), dtype)
            T.fill(F, value)
            T.copy(F, Y[bx * bm, 0])

    return k


def gemm(M, N, K, bm, bn, bk, in_dt, acc_dt, ta=False, tb=False, clear=False):
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    as_shape = (bk, bm) if ta else (bm, bk)
    bs_shape = (bn, bk) if tb else (bk, bn)

    @T.prim_func
    def k(A: T.Tensor(a_shape, in_dt), B: T.Tensor(b_shape, in_dt),
          C: T.Tensor((M, N), acc_dt)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared(as_shape, in_dt)
            B_s = T.alloc_shared(bs_shape, in_dt)
            C_l = T.alloc_fragment((bm, bn), acc_dt)
            if clear:
                T.clear(C_l)
            else:
                T.copy(C[by * bm, bx * bn], C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if ta:
                    T.copy(A[ko * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, ko * bk], A_s)
                if tb:
                    T.copy(B[bx * bn, ko * bk], B_s)
                else:
                    T.copy(B[ko * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=ta, transpose_B=tb)
            T.copy(C_l, C[by * bm, bx * bn])

    return k


def gemm_clear_accum(M, N, K, dtype):
    """One block: C = A @ B with clear_accum (C's old contents ignored)."""

    @T.prim_func
    def k(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((K, N), dtype)
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    return k


_REDUCERS = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min,
             "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}


def reduce_rows(kind, bm, n, dim, src_dt, dst_dt, clear, blocks=3):
    """Each block reduces its (bm, n) tile along `dim` into out[block] (n or bm long)."""
    red = _REDUCERS[kind]
    out_len = bm if dim == 1 else n

    @T.prim_func
    def k(X: T.Tensor((blocks * bm, n), src_dt), Y: T.Tensor((blocks, out_len), dst_dt)):
        with T.Kernel(blocks) as bx:
            x = T.alloc_fragment((bm, n), src_dt)
            r = T.alloc_fragment((out_len,), dst_dt)
            T.copy(X[bx * bm, 0], x)
            if not clear:
                T.copy(Y[bx, 0], r)
            red(x, r, dim=dim, clear=clear)
            T.copy(r, Y[bx, 0])

    return k


def cumsum_tile(m, n, dim, reverse, dtype):
    @T.prim_func
    def k(X: T.Tensor((m, n), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(1) as _:
            x = T.alloc_fragment((m, n), dtype)
            T.copy(X, x)
            T.cumsum(x, dim=dim, reverse=reverse)
            T.copy(x, Y)

    return k


def split_k(M, N, S, dtype):
    """Block s adds its slice X[s] (M, N) into Y with a region atomic add."""

    @T.prim_func
    def k(X: T.Tensor((S * M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(S) as bx:
            t = T.alloc_fragment((M, N), dtype)
            T.copy(X[bx * M, 0], t)
            T.atomic_add(Y[0, 0], t)

    return k


def histogram(n, block, bins, dtype):
    """Weighted histogram: lanes add W[i] into H[idx[i]] (many lanes hit one bin)."""

    @T.prim_func
    def k(Idx: T.Tensor((n,), "int32"), W: T.Tensor((n,), dtype), H: T.Tensor((bins,), dtype)):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                j = bx * block + i
                if j < n:
                    w = W[j]
                    T.atomic_add(H[Idx[j]], w)

    return k


def collatz(n, block):
    """Steps for each X[i] to reach 1: a while loop whose condition varies per lane."""

    @T.prim_func
    def k(X: T.Tensor((n,), "int32"), Steps: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            x = T.alloc_fragment((block,), "int32")
            s = T.alloc_fragment((block,), "int32")
            for i in T.Parallel(block):
                x[i] = T.if_then_else(bx * block + i < n, X[bx * block + i], 1)
                s[i] = 0
            for i in T.Parallel(block):
                while x[i] != 1:
                    if x[i] % 2 == 0:
                        x[i] = x[i] // 2
                    else:
                        x[i] = 3 * x[i] + 1
                    s[i] = s[i] + 1
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Steps[bx * block + i] = s[i]

    return k


def prefix_of_blocks(n):
    """Y[b] = sum of X[0..b] with a serial loop whose trip count depends on the block."""

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(n) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for j in T.serial(bx + 1):
                acc += X[j]
            Y[bx] = acc

    return k


def branches(n, block):
    """Lane-varying if/else with a block-varying branch around it."""

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                j = bx * block + i
                if j < n:
                    if X[j] > 0.0:
                        Y[j] = T.sqrt(X[j])
                    else:
                        if bx % 2 == 0:
                            Y[j] = -X[j]
                        else:
                            Y[j] = X[j] * 2.0

    return k


def parallel_2d(m, n, bm, dtype):
    """y[i, j] = exp(x[i, j] - rowmax) / rowsum on (bm, n) tiles, transposed store."""

    @T.prim_func
    def k(X: T.Tensor((m, n), dtype), Y: T.Tensor((n, m), dtype)):
        with T.Kernel(T.ceildiv(m, bm)) as bx:
            x = T.alloc_fragment((bm, n), "float32")
            mx = T.alloc_fragment((bm,), "float32")
            s = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bm, n):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(bm, n):
                if bx * bm + i < m:
                    Y[j, bx * bm + i] = x[i, j] / s[i]

    return k


# ---------------------------------------------------------------- planted faults


def oob_load(n, block):
    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * 2.0  # planted: no edge guard

    return k


def oob_local(block):
    @T.prim_func
    def k(X: T.Tensor((block,), "float32"), Y: T.Tensor((block,), "float32")):
        with T.Kernel(1) as _:
            t = T.alloc_fragment((block,), "float32")
            T.copy(X, t)
            for i in T.Parallel(block):
                Y[i] = t[i + 1]  # planted: reads t[block]

    return k


def race(n):
    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(n // 4) as bx:
            t = T.alloc_fragment((4,), "float32")
            T.copy(X[bx * 4], t)
            T.copy(t, Y[0])  # planted: every block writes Y[0:4]

    return k


def race_scalar(n):
    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(n) as bx:
            Y[bx // 2] = X[bx]  # planted: blocks 2k and 2k+1 write Y[k]

    return k


def uninit_gemm(m):
    @T.prim_func
    def k(A: T.Tensor((m, m), "float32"), C: T.Tensor((m, m), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((m, m), "float32")
            C_l = T.alloc_fragment((m, m), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, C_l)  # planted: C_l never cleared
            T.copy(C_l, C)

    return k


def uninit_shared(m):
    @T.prim_func
    def k(A: T.Tensor((m, m), "float32"), C: T.Tensor((m, m), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((m, m), "float32")
            C_s = T.alloc_shared((m, m), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, C_s)  # planted: C_s never cleared
            T.copy(C_s, C)

    return k


def uninit_partial(n):
    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(2) as bx:
            t = T.alloc_fragment((n,), "float32")
            for i in T.Parallel(n):
                if i < n - 1:
                    t[i] = X[i]
            for i in T.Parallel(n):
                Y[i] = t[i] + bx  # planted: t[n - 1] was never written

    return k


# ---------------------------------------------------------------- debugging


def printing(n):
    @T.prim_func
    def k(X: T.Tensor((2 * n,), "float32"), Y: T.Tensor((2 * n,), "float32")):
        with T.Kernel(2) as bx:
            t = T.alloc_fragment((n,), "float32")
            T.copy(X[bx * n], t)
            print("bx", bx)
            for i in T.Parallel(n):
                print("t", t[i] * 2.0)
            breakpoint()
            T.copy(t, Y[bx * n])

    return k


def edge_pad(m, n, bm, bn):
    """Y (padded to whole tiles) = X with zeros outside: edge-tile reads give 0."""
    gm, gn = -(-m // bm), -(-n // bn)

    @T.prim_func
    def k(X: T.Tensor((m, n), "float32"), Y: T.Tensor((gm * bm, gn * bn), "float32")):
        with T.Kernel(gn, gm) as (bx, by):
            S = T.alloc_shared((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], S)
            T.copy(S, Y[by * bm, bx * bn])

    return k


def some_blocks(n, bn):
    """Tile ops under a block-varying branch: even blocks copy and reduce, odd blocks run
    a gemm of the tile with itself (a sub-batch that cannot update C in place)."""

    @T.prim_func
    def k(X: T.Tensor((n, bn), "float32"), Y: T.Tensor((n, bn), "float32"),
          R: T.Tensor((n // bn, bn), "float32")):
        with T.Kernel(n // bn) as bx:
            t = T.alloc_fragment((bn, bn), "float32")
            r = T.alloc_fragment((bn,), "float32")
            T.copy(X[bx * bn, 0], t)
            if bx % 2 == 0:
                T.reduce_sum(t, r, dim=0)
                T.cumsum(t, dim=1)
            else:
                c = T.alloc_fragment((bn, bn), "float32")
                T.fill(c, 1.0)
                T.gemm(t, t, c)
                T.copy(c, t)
                T.fill(r, bx)
            T.copy(t, Y[bx * bn, 0])
            T.copy(r, R[bx, 0])

    return k


def reverse_tiles(g, block):
    """Block b reads tile b and writes it as tile g-1-b: tiles not in memory order."""

    @T.prim_func
    def k(X: T.Tensor((g * block,), "float32"), Y: T.Tensor((g * block,), "float32")):
        with T.Kernel(g) as bx:
            for i in T.Parallel(block):
                Y[(g - 1 - bx) * block + i] = X[bx * block + i] + 1.0

    return k


def horner(n, block, degree):
    """y = polynomial(x) by Horner's rule over an unrolled loop (mul, then add: no FMA)."""

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), C: T.Tensor((degree,), "float32"),
          Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            acc = T.alloc_fragment((block,), "float32")
            for i in T.Parallel(block):
                acc[i] = 0.0
            for d in T.unroll(degree):
                for i in T.Parallel(block):
                    j = bx * block + i
                    if j < n:
                        acc[i] = acc[i] * X[j] + C[d]
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Y[bx * block + i] = acc[i]

    return k
