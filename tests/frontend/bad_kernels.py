"""Kernels with planted mistakes; the tests assert the line each error names.
Each function builds one bad kernel when called. Add new cases at the end."""

import tilepy.language as T


def undefined_name():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(1) as _:
            A[0] = missing + 1  # noqa: F821


def gemm_shapes():
    @T.prim_func
    def k(A: T.Tensor((64, 32), "float16"), B: T.Tensor((16, 64), "float16")):
        with T.Kernel(1) as _:
            a = T.alloc_shared((64, 32), "float16")
            b = T.alloc_shared((16, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.gemm(a, b, c)


def copy_shapes():
    @T.prim_func
    def k(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1) as _:
            a = T.alloc_shared((32, 32), "float32")
            T.copy(A[0:16, 0:32], a)


def reassign_in_loop():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1) as _:
            acc = A[0]
            for i in range(8):
                acc = acc + A[i]


def int_division():
    @T.prim_func
    def k(A: T.Tensor((8,), "int32")):
        with T.Kernel(1) as _:
            A[0] = A[1] / A[2]


def copy_outside_kernel():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        T.copy(A, B)


def wrong_rank():
    @T.prim_func
    def k(A: T.Tensor((8, 8), "float32")):
        with T.Kernel(1) as _:
            A[0] = 1.0


def literal_accumulator(loop):
    """`loop` is T.serial, T.Parallel, T.Pipelined, T.unroll or range."""

    @T.prim_func
    def k(X: T.Tensor((8,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1) as _:
            s = 0.0
            for i in loop(8):
                s = s + X[i]  # literal accumulator
            Y[0] = s


def literal_augmented_accumulator():
    @T.prim_func
    def k(X: T.Tensor((8,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1) as _:
            s = 0.0
            for i in T.serial(8):
                s += X[i]  # augmented accumulator
            Y[0] = s


def literal_counter_in_while():
    @T.prim_func
    def k(X: T.Tensor((1,), "int32"), Y: T.Tensor((1,), "int32")):
        with T.Kernel(1) as _:
            n = 0
            v = T.alloc_var("int32", init=X[0])
            while v > 1:
                v = v // 2
                n = n + 1  # while counter
            Y[0] = n


def rebound_in_branch(start_literal: bool):
    @T.prim_func
    def k(X: T.Tensor((4,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1) as _:
            s = 0.0 if start_literal else X[3]
            if X[0] > 0:  # the runtime branch
                s = X[1]
            else:
                Y[0] = 1.0
            Y[0] = s  # read after the branch
