"""Kernels the front-end tests translate. Line numbers here are asserted by the tests:
add new kernels at the end of the file."""

import tilepy
import tilepy.language as T


@tilepy.jit(out_idx=[-1])
def matmul(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@tilepy.jit
def softmax(X, block: int = 128):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), "float32")
    Y = T.empty((M, N), "float32")
    with T.Kernel(M) as bx:
        x = T.alloc_fragment((block,), "float32")
        m = T.alloc_fragment((1,), "float32")
        s = T.alloc_fragment((1,), "float32")
        T.copy(X[bx, 0], x)
        T.reduce_max(x, m, dim=0)
        for i in T.Parallel(block):
            x[i] = T.exp(x[i] - m[0])
        T.reduce_sum(x, s, dim=0)
        for i in T.Parallel(block):
            x[i] = x[i] / s[0]
        T.copy(x, Y[bx, 0])
    return Y


M = T.symbolic("M")


@T.prim_func
def scale_rows(X: T.Tensor((M, 64), "bfloat16"), Y: T.Tensor((M, 64), "bfloat16")):
    with T.Kernel(T.ceildiv(M, 16)) as bx:
        tile = T.alloc_fragment((16, 64), "bfloat16")
        T.copy(X[bx * 16:bx * 16 + 16, :], tile)
        for i, j in T.Parallel(16, 64):
            y = tile[i, j] * 0.1
            if bx * 16 + i < M:
                Y[bx * 16 + i, j] = y


@T.macro
def add_one(buf, i):
    buf[i] = buf[i] + 1.0


@T.prim_func
def counter(X: T.Tensor((8,), "float32"), Y: T.Tensor((1,), "float32")):
    with T.Kernel(1) as _:
        acc = T.alloc_var("float32", init=0.0)
        t = T.alloc_fragment((8,), "float32")
        T.copy(X, t)
        for i in range(8):
            acc += t[i]
        for i in T.Parallel(8):
            add_one(t, i)
        if 2 > 1:
            Y[0] = acc
        else:
            Y[0] = -acc
